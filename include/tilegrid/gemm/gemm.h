#pragma once
// Matrix products with float32 accumulation: out[M, N] = a[M, K] * b[K, N].
//
// a and b: float16 or bfloat16, both the same. Each is a 2-D view that is contiguous along
// one of its dimensions (a row-major matrix, or the transpose of one, e.g. torch's w.t()),
// which gives the three products of a linear layer y = x * w^T (x [tokens, in], w [out, in]):
//   forward          y  = x    * w^T   a = x  (row-major), b = w^T (transposed view)
//   data gradient    dx = dy   * w     a = dy (row-major), b = w   (row-major)
//   weight gradient  dw = dy^T * x     a = dy^T (transposed view), b = x (row-major)
// a and b both transposed views is rejected (make one contiguous). Dimensions along which an
// operand or the output is contiguous must be multiples of 8, and so must leading strides,
// with 16-byte aligned data pointers (the Hopper kernels load whole 16-byte rows with TMA);
// the other dimension may be anything - in a linear layer the token count is free, the
// feature sizes are multiples of 8.
// out: row-major [M, N] (its row stride may exceed N), in a's dtype or float32.
//
// On a compute-capability 9.0 GPU (H100/H200) this runs CUTLASS's TMA warp-specialized
// kernels for sm_90a; on other CUDA GPUs a portable kernel that is correct but not tuned; on
// the CPU a blocked float32 reference. describe_matmul says which one a call takes.
#include <cstdint>
#include <string>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid {

// Which kernel runs a matmul. Auto picks by device and shape; the others force one (for
// benchmarks and tests) and raise an error on a device that cannot run it.
enum class MatmulKernel : uint8_t { Auto, Sm90Cooperative, Sm90Pingpong, Portable };

void matmul(const TensorView& a, const TensorView& b, const TensorView& out, Stream stream = {},
            MatmulKernel kernel = MatmulKernel::Auto);

// The three products of a linear layer with their arguments named, each a matmul of
// row-major tensors: x [M, in], weight [out, in], dy [M, out].
// y = x * weight^T: y [M, out].
void linear_forward(const TensorView& x, const TensorView& weight, const TensorView& y,
                    Stream stream = {});
// dx = dy * weight: dx [M, in].
void linear_backward_input(const TensorView& dy, const TensorView& weight, const TensorView& dx,
                           Stream stream = {});
// dweight = dy^T * x: dweight [out, in].
void linear_backward_weight(const TensorView& dy, const TensorView& x, const TensorView& dweight,
                            Stream stream = {});

// The kernel that matmul(a, b, out, {}, kernel) would run, e.g. "sm90 cooperative 128x256x64
// cluster 2x1", "portable CUDA (untuned)" or "cpu reference"; checks the arguments as matmul
// does.
std::string describe_matmul(const TensorView& a, const TensorView& b, const TensorView& out,
                            MatmulKernel kernel = MatmulKernel::Auto);

}  // namespace tilegrid
