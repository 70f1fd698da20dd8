// Cross-entropy rows front end: validates every argument, then runs the CPU reference or the
// CUDA kernel.
#include "tilegrid/fusion/cross_entropy.h"

#include "fusion/cross_entropy_params.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/error.h"
#ifdef TILEGRID_WITH_CUDA
#include "fusion/cross_entropy_cuda.h"
#endif

namespace tilegrid {
namespace {
constexpr const char* kOp = "cross_entropy_loss_and_grad";
}  // namespace

void cross_entropy_loss_and_grad(const TensorView& logits, const TensorView& target,
                                 int64_t ignore_index, const TensorView& loss,
                                 const std::optional<TensorView>& grad_scale, Stream stream) {
  check_dtype(kOp, "logits", logits, {DType::Float32, DType::Float16, DType::BFloat16});
  check_ndim(kOp, "logits", logits, 2);
  check_last_dim_contiguous(kOp, "logits", logits);
  check_data(kOp, "logits", logits);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  TG_CHECK_VALUE(vocab >= 1 || rows == 0, kOp, ": logits must have at least one column, got shape ",
                 logits.shape);
  TG_CHECK_VALUE(rows <= 1 || logits.strides[0] >= vocab, kOp,
                 ": rows of logits overlap (row stride ", logits.strides[0], " < ", vocab,
                 " columns)");
  check_same_device(kOp, "target", target, "logits", logits);
  check_dtype(kOp, "target", target, {DType::Int64});
  check_shape(kOp, "target", target, {rows});
  check_contiguous(kOp, "target", target);
  check_data(kOp, "target", target);
  check_same_device(kOp, "loss", loss, "logits", logits);
  check_dtype(kOp, "loss", loss, {DType::Float32});
  check_shape(kOp, "loss", loss, {rows});
  check_contiguous(kOp, "loss", loss);
  check_data(kOp, "loss", loss);
  if (grad_scale) {
    check_same_device(kOp, "grad_scale", *grad_scale, "logits", logits);
    check_dtype(kOp, "grad_scale", *grad_scale, {DType::Float32});
    TG_CHECK_VALUE(grad_scale->numel() == 1, kOp, ": grad_scale must hold one element, got shape ",
                   grad_scale->shape);
    TG_CHECK_VALUE(grad_scale->data != nullptr, kOp, ": grad_scale has no data");
  }

  cross_entropy::Params p;
  p.rows = rows;
  p.vocab = vocab;
  p.dtype = logits.dtype;
  p.logits = logits.data;
  p.row_stride = rows > 1 ? logits.strides[0] : vocab;
  p.target = target.data_ptr<const int64_t>();
  p.ignore_index = ignore_index;
  p.loss = loss.data_ptr<float>();
  p.grad_scale = grad_scale ? grad_scale->data_ptr<const float>() : nullptr;
  if (rows == 0) return;

  if (logits.device.is_cpu()) return cross_entropy::loss_and_grad_cpu(p);
#ifdef TILEGRID_WITH_CUDA
  cross_entropy::loss_and_grad_cuda(p, logits.device.index, stream);
#else
  (void)stream;
  throw Error(
      detail::concat(kOp, ": tilegrid was built without CUDA; logits are on ", logits.device));
#endif
}

}  // namespace tilegrid
