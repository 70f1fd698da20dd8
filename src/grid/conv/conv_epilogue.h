#pragma once
// What a sparse convolution's forward may apply to each output value before storing it
// (internal; the public form is convolution.h's ConvEpilogue): a BatchNorm in eval mode folded
// into a per-channel scale and shift, a residual block's skip input, a ReLU,
//   out[o][c] = relu?(sum[o][c] * scale[c] + shift[c] + residual[o][c]).
// The Hopper kernel applies it to its float32 sums; the other kernels and the CPU reference
// apply the same formula after their own sums.
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::grid {

struct ConvEpilogueArgs {
  const float* scale = nullptr;    // [C_out], or null: 1
  const float* shift = nullptr;    // [C_out], or null: 0
  const void* residual = nullptr;  // [N_out, C_out] in the output's dtype, or null: 0
  bool relu = false;

  TG_HOST_DEVICE bool any() const {
    return scale != nullptr || shift != nullptr || residual != nullptr || relu;
  }

  // `residual_value`: residual[o][c] in Acc (0 where there is none).
  template <class Acc>
  TG_HOST_DEVICE Acc apply(Acc v, int64_t c, Acc residual_value) const {
    if (scale != nullptr) v *= Acc(scale[c]);
    if (shift != nullptr) v += Acc(shift[c]);
    v += residual_value;
    return relu && v < Acc(0) ? Acc(0) : v;
  }
};

}  // namespace tilegrid::grid
