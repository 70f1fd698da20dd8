#pragma once
// Rotary position embedding (RoPE) on interleaved pairs, as one pass over a matrix: the
// rotation of the QKV product's epilogue (tilegrid/gemm/epilogue/pairwise.h, `rope`) as an op
// of its own. Its user is that product's backward, which rotates the q and k gradients back
// (inverse = true) straight into their columns of the wider QKV gradient.
//
// x is [M, W]: W / D heads of head dimension D = 2 * inv_freq.numel() side by side. For row
// i, head h and pair j (columns c = h D + 2j and c + 1), with t = positions[i] * inv_freq[j]
// (-t when inverse):
//   out[i, c]     = x[i, c] cos t - x[i, c + 1] sin t
//   out[i, c + 1] = x[i, c] sin t + x[i, c + 1] cos t
//
// x: float32, float16 or bfloat16, the last dimension contiguous, any row stride (0 too: an
// expanded row); out: x's dtype and shape, the last dimension contiguous, rows that do not
// overlap (a column block of a wider matrix, e.g. d[:, a:a + W], is fine); out may be x itself
// (in place) but must not overlap it otherwise; positions: int32 or int64 [M], contiguous;
// inv_freq: float32 [D / 2], contiguous, D / 2 >= 1. Math is float32 on the GPU (the angle as
// float(position) * inv_freq[j], as the epilogue computes it), float64 on the CPU (the
// reference); each output is rounded to out's dtype once.
#include "tilegrid/core/tensor_view.h"

namespace tilegrid {

void rope_rotate(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
                 bool inverse, const TensorView& out, Stream stream = {});

}  // namespace tilegrid
