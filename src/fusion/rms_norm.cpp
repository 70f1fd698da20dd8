// RMSNorm front end: validates every argument, flattens [..., H] into rows, and dispatches
// to the CPU reference or the CUDA kernels.
#include "tilegrid/fusion/rms_norm.h"

#include <cmath>
#include <cstdint>

#include "core/cuda_build.h"
#include "fusion/rms_norm_params.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "fusion/rms_norm_cuda.h"
#endif

namespace tilegrid {
namespace {

constexpr const char* kForward = "rms_norm_forward";
constexpr const char* kBackward = "rms_norm_backward";

// Rows of a [..., H] tensor whose last dimension is contiguous: the leading dimensions must
// collapse into one row stride (true for contiguous tensors and for row slices of them).
rms_norm::RowMatrix as_rows(const char* op, const char* arg, const TensorView& t) {
  check_data(op, arg, t);
  check_last_dim_contiguous(op, arg, t);
  int64_t row_stride = t.size(-1);
  bool have_stride = false;
  int64_t expected = 0;
  for (int i = t.ndim() - 2; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (!have_stride) {
      row_stride = t.strides[i];
      expected = row_stride * t.shape[i];
      have_stride = true;
      continue;
    }
    TG_CHECK_VALUE(t.strides[i] == expected, op, ": the leading dimensions of ", arg,
                   " must flatten into rows with one stride; got shape ", t.shape, " with strides ",
                   t.strides, " (call .contiguous() first)");
    expected *= t.shape[i];
  }
  TG_CHECK_VALUE(row_stride >= t.size(-1) || t.numel() / t.size(-1) <= 1, op, ": rows of ", arg,
                 " overlap (row stride ", row_stride, " < hidden size ", t.size(-1), ")");
  return {t.data, row_stride};
}

void check_x_like(const char* op, const char* arg, const TensorView& t, const char* ref_arg,
                  const TensorView& ref) {
  check_same_device(op, arg, t, ref_arg, ref);
  check_dtype(op, arg, t, {ref.dtype});
  check_shape(op, arg, t, ref.shape);
}

Shape rows_shape(const TensorView& x) {
  Shape s;
  for (int i = 0; i < x.ndim() - 1; ++i) s.push_back(x.shape[i]);
  return s;
}

void check_weight(const char* op, const TensorView& w, const TensorView& x) {
  check_same_device(op, "weight", w, "x", x);
  check_dtype(op, "weight", w, {x.dtype, DType::Float32});
  check_shape(op, "weight", w, {x.size(-1)});
  check_contiguous(op, "weight", w);
  check_data(op, "weight", w);
}

}  // namespace

void rms_norm_forward(const TensorView& x, const std::optional<TensorView>& weight, double eps,
                      const TensorView& y, const std::optional<TensorView>& rstd, Stream stream) {
  check_dtype(kForward, "x", x, {DType::Float32, DType::Float16, DType::BFloat16});
  TG_CHECK_VALUE(x.ndim() >= 1 && x.size(-1) >= 1, kForward,
                 ": x must be [..., H] with H >= 1, got shape ", x.shape);
  check_last_dim_contiguous(kForward, "x", x);
  TG_CHECK_VALUE(std::isfinite(eps) && eps >= 0, kForward, ": eps must be finite and >= 0, got ",
                 eps);
  check_x_like(kForward, "y", y, "x", x);
  check_contiguous(kForward, "y", y);
  if (weight) check_weight(kForward, *weight, x);
  if (rstd) {
    check_same_device(kForward, "rstd", *rstd, "x", x);
    check_dtype(kForward, "rstd", *rstd, {DType::Float32});
    check_shape(kForward, "rstd", *rstd, rows_shape(x));
    check_contiguous(kForward, "rstd", *rstd);
  }

  rms_norm::ForwardParams p;
  p.hidden = x.size(-1);
  p.rows = x.numel() / p.hidden;
  p.dtype = x.dtype;
  p.x = as_rows(kForward, "x", x);
  p.y = as_rows(kForward, "y", y);
  if (weight) {
    p.weight = weight->data;
    p.weight_dtype = weight->dtype;
  }
  p.rstd = rstd ? rstd->data_ptr<float>() : nullptr;
  p.eps = static_cast<float>(eps);
  if (p.rows == 0) return;

  if (x.device.is_cpu()) return rms_norm::forward_cpu(p);
  require_cuda_build(kForward);
#ifdef TILEGRID_WITH_CUDA
  rms_norm::forward_cuda(p, x.device.index, stream);
#endif
}

void rms_norm_backward(const TensorView& dy, const TensorView& x,
                       const std::optional<TensorView>& weight, const TensorView& rstd,
                       const TensorView& dx, const std::optional<TensorView>& dweight,
                       Stream stream, const std::optional<TensorView>& dresidual) {
  check_dtype(kBackward, "x", x, {DType::Float32, DType::Float16, DType::BFloat16});
  TG_CHECK_VALUE(x.ndim() >= 1 && x.size(-1) >= 1, kBackward,
                 ": x must be [..., H] with H >= 1, got shape ", x.shape);
  check_last_dim_contiguous(kBackward, "x", x);
  check_x_like(kBackward, "dy", dy, "x", x);
  check_x_like(kBackward, "dx", dx, "x", x);
  check_contiguous(kBackward, "dx", dx);
  if (dresidual) check_x_like(kBackward, "dresidual", *dresidual, "x", x);
  check_same_device(kBackward, "rstd", rstd, "x", x);
  check_dtype(kBackward, "rstd", rstd, {DType::Float32});
  check_shape(kBackward, "rstd", rstd, rows_shape(x));
  check_contiguous(kBackward, "rstd", rstd);
  TG_CHECK_VALUE(weight.has_value() == dweight.has_value(), kBackward,
                 ": dweight must be given exactly when weight is given (weight ",
                 weight ? "given" : "absent", ", dweight ", dweight ? "given" : "absent", ")");
  if (weight) {
    check_weight(kBackward, *weight, x);
    check_same_device(kBackward, "dweight", *dweight, "x", x);
    check_dtype(kBackward, "dweight", *dweight, {weight->dtype});
    check_shape(kBackward, "dweight", *dweight, weight->shape);
    check_contiguous(kBackward, "dweight", *dweight);
  }

  rms_norm::BackwardParams p;
  p.hidden = x.size(-1);
  p.rows = x.numel() / p.hidden;
  p.dtype = x.dtype;
  p.dy = as_rows(kBackward, "dy", dy);
  p.x = as_rows(kBackward, "x", x);
  p.dx = as_rows(kBackward, "dx", dx);
  if (dresidual) p.dresidual = as_rows(kBackward, "dresidual", *dresidual);
  p.rstd = rstd.data_ptr<const float>();
  if (weight) {
    p.weight = weight->data;
    p.weight_dtype = weight->dtype;
    p.dweight = dweight->data;
  }

  if (x.device.is_cpu()) return rms_norm::backward_cpu(p);
  require_cuda_build(kBackward);
#ifdef TILEGRID_WITH_CUDA
  rms_norm::backward_cuda(p, x.device.index, stream);
#endif
}

}  // namespace tilegrid
