#pragma once
// The K steps of the Hopper weight-gradient kernel (sparse_conv_sm90_wgrad_kernel.cuh): for
// each tap, the steps of 64 output rows (in the forward's row order) that hold a pair of that
// tap, with each row's (input, output).
#include <cstdint>

#include "tilegrid/core/tensor.h"

namespace tilegrid::grid::sm90 {

constexpr int kStepRows = 64;

struct WgradSteps {
  Tensor pairs;      // int2 [listed steps][64] as bytes: (input row or -1, output row or -1)
  Tensor tap_begin;  // int32 [volume + 1]: tap t's steps are [tap_begin[t], tap_begin[t + 1])
};

// order: the output rows' order (null: in order); map_in_row_order: the map's columns in that
// order (null: read through the order). The listed steps are not known on the host (no copy
// back): `pairs` has room for every step of every tap, volume * ceil(rows / 64) * 64 pairs
// (twice the map's bytes).
WgradSteps wgrad_steps(const int32_t* map, const int32_t* order, const int32_t* map_in_row_order,
                       int64_t volume, int64_t rows, int64_t feature_rows, int device,
                       Stream stream);

}  // namespace tilegrid::grid::sm90
