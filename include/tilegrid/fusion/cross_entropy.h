#pragma once
// Cross-entropy over rows of logits: the loss and the logits' gradient in one op, the gradient
// written over the logits. It is the row kernel between the two products of a linear +
// cross-entropy (tilegrid.linear_cross_entropy): logits = x W^T, then this, then
// d x = d logits W and d W = d logits^T x, so the logits never exist in float32.
//
// For each row r of logits [N, V] whose target t = target[r] is not ignore_index:
//   loss[r]      = logsumexp(logits[r, :]) - logits[r, t]
//   logits[r, :] <- (softmax(logits[r, :]) - onehot(t)) * grad_scale   (if grad_scale given)
// Rows whose target is ignore_index get loss 0 and a gradient row of zeros. A target outside
// [0, V) that is not ignore_index (not checked before the kernel runs: it would need the
// targets on the host) gets loss NaN and its softmax as the gradient row.
//
// logits: [N, V], float32, float16 or bfloat16, the last dimension contiguous, any row stride
// >= V; target: int64 [N], contiguous; loss: float32 [N], contiguous; grad_scale: float32,
// one element (a device tensor, so that a mean's 1 / count needs no read back to the host),
// on the logits' device. Math is float32 (exp and sums), the gradient rounded to the logits'
// dtype once. CPU: a reference that sums in float64.
#include <cstdint>
#include <optional>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid {

void cross_entropy_loss_and_grad(const TensorView& logits, const TensorView& target,
                                 int64_t ignore_index, const TensorView& loss,
                                 const std::optional<TensorView>& grad_scale, Stream stream = {});

}  // namespace tilegrid
