#pragma once
// Kernel parameters of the Hopper sparse convolution (plain structs, shared by the host code
// and the kernels).
#include <vector_types.h>

#include <cstdint>

#include "grid/conv/conv_epilogue.h"

namespace tilegrid::grid::sm90 {

// The forward / input-gradient kernel (sparse_conv_sm90_kernel.cuh).
struct ConvKernelParams {
  const int32_t* map;               // [volume, rows]
  const int32_t* row_order;         // [rows] or null
  const int32_t* map_in_row_order;  // [volume, rows]: map[t][row_order[i]] at [t][i], or null
  int64_t volume, rows;
  const void* features;  // [feature_rows, cin]
  int64_t feature_rows;
  const void* weight;
  int64_t cin, cout;
  void* out;  // [rows, cout]
  int col_tiles;
  ConvEpilogueArgs epilogue;  // applied to the float32 sums before they are rounded
};

// The weight-gradient kernel (sparse_conv_sm90_wgrad_kernel.cuh).
struct WgradKernelParams {
  const int2* pairs;         // [steps listed][64]: (input row or -1, output row or -1)
  const int32_t* tap_begin;  // [volume + 1]: tap t's steps are [tap_begin[t], tap_begin[t+1])
  const void* features;      // [feature_rows, cin]
  const void* grad_out;      // [rows, cout]
  int64_t cin, cout, volume;
  int chunks, n_tiles;
  float* partials;  // [chunks][volume][cin][cout]
};

}  // namespace tilegrid::grid::sm90
