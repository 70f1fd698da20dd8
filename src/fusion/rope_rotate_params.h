#pragma once
// RoPE rotation problem shared by the validating front end and the CPU/CUDA back ends
// (internal). See include/tilegrid/fusion/rope_rotate.h for the semantics.
#include <cstdint>

#include "tilegrid/core/dtype.h"

namespace tilegrid::rope {

struct Params {
  int64_t rows = 0, width = 0;   // x and out are [rows, width]
  int64_t half = 0;              // pairs a head: head_dim / 2, the length of inv_freq
  DType dtype = DType::Float32;  // x and out
  const void* x = nullptr;
  int64_t x_row_stride = 0;  // in elements
  void* out = nullptr;
  int64_t out_row_stride = 0;
  const void* positions = nullptr;      // [rows]
  DType position_dtype = DType::Int64;  // int32 or int64
  const float* inv_freq = nullptr;      // [half]
  bool inverse = false;
};

void rotate_cpu(const Params& p);

}  // namespace tilegrid::rope
