// RoPE rotation front end: validates every argument, then runs the CPU reference or the CUDA
// kernel.
#include <cstdint>

#include "tilegrid/fusion/rope_rotate.h"

#include "fusion/rope_rotate_params.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/error.h"
#ifdef TILEGRID_WITH_CUDA
#include "fusion/rope_rotate_cuda.h"
#endif

namespace tilegrid {
namespace {
constexpr const char* kOp = "rope_rotate";
}  // namespace

void rope_rotate(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
                 bool inverse, const TensorView& out, Stream stream) {
  check_dtype(kOp, "x", x, {DType::Float32, DType::Float16, DType::BFloat16});
  check_ndim(kOp, "x", x, 2);
  check_last_dim_contiguous(kOp, "x", x);
  check_data(kOp, "x", x);
  const int64_t rows = x.size(0), width = x.size(1);
  TG_CHECK_VALUE(rows <= 1 || x.strides[0] >= 0, kOp, ": x must have a row stride >= 0, got ",
                 x.strides[0]);

  check_same_device(kOp, "inv_freq", inv_freq, "x", x);
  check_dtype(kOp, "inv_freq", inv_freq, {DType::Float32});
  check_ndim(kOp, "inv_freq", inv_freq, 1);
  check_contiguous(kOp, "inv_freq", inv_freq);
  check_data(kOp, "inv_freq", inv_freq);
  const int64_t half = inv_freq.size(0);
  TG_CHECK_VALUE(half >= 1, kOp, ": inv_freq must hold head_dim / 2 >= 1 frequencies, got shape ",
                 inv_freq.shape);
  TG_CHECK_VALUE(width % (2 * half) == 0, kOp, ": x's ", width,
                 " columns must be whole heads of head_dim 2 * inv_freq.numel() = ", 2 * half);

  check_same_device(kOp, "positions", positions, "x", x);
  check_dtype(kOp, "positions", positions, {DType::Int32, DType::Int64});
  check_shape(kOp, "positions", positions, {rows});
  check_contiguous(kOp, "positions", positions);
  check_data(kOp, "positions", positions);

  check_same_device(kOp, "out", out, "x", x);
  check_dtype(kOp, "out", out, {x.dtype});
  check_shape(kOp, "out", out, x.shape);
  check_last_dim_contiguous(kOp, "out", out);
  check_data(kOp, "out", out);
  const int64_t x_row_stride = rows > 1 ? x.strides[0] : width;
  const int64_t out_row_stride = rows > 1 ? out.strides[0] : width;
  TG_CHECK_VALUE(rows <= 1 || out_row_stride >= width, kOp, ": rows of out overlap (row stride ",
                 out_row_stride, " < ", width, " columns)");
  TG_CHECK_VALUE(out.data != x.data || out_row_stride == x_row_stride || rows <= 1 || width == 0,
                 kOp, ": out starts where x does but with another row stride (", out_row_stride,
                 " vs ", x_row_stride, "); in place, out must be x itself");

  rope::Params p;
  p.rows = rows;
  p.width = width;
  p.half = half;
  p.dtype = x.dtype;
  p.x = x.data;
  p.x_row_stride = x_row_stride;
  p.out = out.data;
  p.out_row_stride = out_row_stride;
  p.positions = positions.data;
  p.position_dtype = positions.dtype;
  p.inv_freq = inv_freq.data_ptr<const float>();
  p.inverse = inverse;
  if (rows == 0 || width == 0) return;

  if (x.device.is_cpu()) return rope::rotate_cpu(p);
#ifdef TILEGRID_WITH_CUDA
  rope::rotate_cuda(p, x.device.index, stream);
#else
  (void)stream;
  throw Error(detail::concat(kOp, ": tilegrid was built without CUDA; x is on ", x.device));
#endif
}

}  // namespace tilegrid
