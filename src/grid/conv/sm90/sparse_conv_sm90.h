#pragma once
// Hopper sparse convolution (internal; sparse_conv_sm90_kernel.cuh): the forward and input
// gradient GEMMs on wgmma.
#include <cstdint>

#include "grid/conv/conv_cuda.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::grid::sm90 {
// Taps whose map rows a tile keeps in shared memory: kernels up to 3x3x3.
constexpr int kMaxTaps = 27;
}  // namespace tilegrid::grid::sm90

namespace tilegrid::grid::cuda {

// Runs `problem` on the Hopper kernel and returns true when it takes it: float16 / bfloat16,
// channel counts multiples of 8, at most 27 taps, 16-byte aligned operands. Returns false,
// launching nothing, otherwise. The caller has made sure that the device runs it
// (hopper_kernels_run_on, tilegrid/core/kernel_choice.h).
bool sparse_conv_forward_sm90(const GatherGemm& problem, Stream stream);

// The weight gradient's float32 partial sums on the Hopper kernel: `partials` [chunks][volume]
// [C_in][C_out] (allocated here), to be added in chunk order. Takes the same cases as the
// forward; returns false, launching nothing, otherwise.
bool sparse_conv_weight_partials_sm90(const WeightGrad& problem, int device, Stream stream,
                                      Tensor& partials, int64_t& chunks);

}  // namespace tilegrid::grid::cuda
