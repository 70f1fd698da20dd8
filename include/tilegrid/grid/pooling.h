#pragma once
// Max and average pooling over a kernel map (fVDB's max_pool / avg_pool run on these). A window
// is a convolution's receptive field: map [taps, N_out] from kernel_map, its inverse [taps,
// N_in] from invert_kernel_map. features [N_in, C] and the results are of one float dtype
// (float64, float32, float16, bfloat16), contiguous, on the map's device. The sums run in
// float64 on the CPU and float32 on the GPU; the maxima are exact. No atomics: every result
// element is written by one thread, the same bits every run.
#include "tilegrid/core/tensor.h"

namespace tilegrid::grid {

// out[o][c] = the largest features[map[t][o]][c] over the taps present (NaN if one of them is
// NaN), 0 where no tap is present; argmax [N_out, C] int32 = the input row it came from (the
// first such tap's on ties), -1 where none.
void max_pool_forward(const TensorView& map, const TensorView& features, const TensorView& out,
                      const TensorView& argmax, Stream stream = {});

// grad_features[i][c] = the sum over taps t with inverse[t][i] = o >= 0 and argmax[o][c] == i
// of grad_out[o][c] (overwritten; 0 where i is no window's maximum).
void max_pool_backward(const TensorView& inverse, const TensorView& argmax,
                       const TensorView& grad_out, const TensorView& grad_features,
                       Stream stream = {});

// out[o][c] = the mean of features[map[t][o]][c] over the taps present, 0 where none.
void avg_pool_forward(const TensorView& map, const TensorView& features, const TensorView& out,
                      Stream stream = {});

// grad_features[i][c] = the sum over taps t with inverse[t][i] = o >= 0 of grad_out[o][c] / n_o,
// n_o the taps present at o (overwritten).
void avg_pool_backward(const TensorView& map, const TensorView& inverse, const TensorView& grad_out,
                       const TensorView& grad_features, Stream stream = {});

}  // namespace tilegrid::grid
