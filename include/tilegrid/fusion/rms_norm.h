#pragma once
// RMSNorm over the last dimension:  y = x * rsqrt(mean(x^2, -1) + eps) * weight.
//
// x is [..., H] with a contiguous last dimension and leading dimensions that flatten to
// rows with one stride; H may be any size >= 1. Math is float32 whatever the storage type.
// Supported storage: x in float32, float16 or bfloat16; weight in x's dtype or float32
// (the mixed-precision case of an fp32 parameter under autocast); y in x's dtype.
#include <optional>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid {

// y: contiguous, x's shape and dtype. rstd (optional): float32, contiguous, x's shape
// without the last dimension; receives rsqrt(mean(x^2) + eps) per row for the backward.
// weight (optional): [H]; absent means all ones.
void rms_norm_forward(const TensorView& x, const std::optional<TensorView>& weight, double eps,
                      const TensorView& y, const std::optional<TensorView>& rstd,
                      Stream stream = {});

// dx = rstd * (w*dy - xhat * mean(xhat * w*dy)) [+ dresidual] with xhat = x * rstd, and
// dweight = sum over rows of dy * xhat. dy and x as in the forward; rstd from the forward;
// dx: contiguous, x's shape and dtype; dweight (required when weight is given): [H], weight's
// dtype, contiguous. dresidual (optional): laid out as dy; the gradient that a residual
// connection around the norm (h = x + f(norm(x))) carries to x, added to dx in the same
// pass instead of by a separate accumulation (dx may be dresidual itself).
void rms_norm_backward(const TensorView& dy, const TensorView& x,
                       const std::optional<TensorView>& weight, const TensorView& rstd,
                       const TensorView& dx, const std::optional<TensorView>& dweight,
                       Stream stream = {},
                       const std::optional<TensorView>& dresidual = std::nullopt);

}  // namespace tilegrid
