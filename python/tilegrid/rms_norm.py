"""RMSNorm as a PyTorch op: y = x * rsqrt(mean(x**2, -1) + eps) * weight.

Registered with torch.library.custom_op, so autograd, torch.compile (fake kernels) and CUDA
graphs see one op; the C++ kernels run on the CPU or the GPU depending on where x lives.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._torch import current_stream


@torch.library.custom_op("tilegrid::rms_norm_forward", mutates_args=())
def _forward(
    x: torch.Tensor, weight: Optional[torch.Tensor], eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    _C.rms_norm_forward(x, weight, eps, y, rstd, current_stream(x))
    return y, rstd


@_forward.register_fake
def _(x, weight, eps):
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    return y, x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("tilegrid::rms_norm_backward", mutates_args=())
def _backward(
    dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (dx, dweight); dweight is an empty tensor when weight is None."""
    dy = dy.contiguous()  # autograd may hand us expanded or strided gradients
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = torch.empty_like(weight) if weight is not None else x.new_empty(0)
    _C.rms_norm_backward(
        dy, x, weight, rstd, dx, dweight if weight is not None else None, current_stream(x)
    )
    return dx, dweight


@_backward.register_fake
def _(dy, x, weight, rstd):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    return dx, torch.empty_like(weight) if weight is not None else x.new_empty(0)


def _setup_context(ctx, inputs, output):
    x, weight, _ = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.mark_non_differentiable(rstd)


def _autograd_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dweight = _backward(dy, x, weight, rstd)
    return dx, (dweight if weight is not None else None), None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def rms_norm(
    x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: Optional[float] = None
) -> torch.Tensor:
    """RMSNorm over the last dimension of `x`, as torch.nn.functional.rms_norm(x, (H,),
    weight, eps). `eps=None` picks torch's default (float32's machine epsilon for float16 and
    bfloat16 inputs, whose math runs in float32).

    x: float32/float16/bfloat16 with a contiguous last dimension; weight: [H] in x's dtype or
    float32. The output has x's dtype; all math is float32.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rms_norm: x must be a torch.Tensor, got {type(x).__name__}")
    if eps is None:
        # torch takes eps of the type it computes in: float32 for half-precision inputs.
        compute_dtype = torch.promote_types(x.dtype, torch.float32)
        eps = torch.finfo(compute_dtype).eps if compute_dtype.is_floating_point else 0.0
    y, _ = _forward(x, weight, float(eps))
    return y
