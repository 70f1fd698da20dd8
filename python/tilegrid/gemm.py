"""Matrix products with float32 accumulation as PyTorch ops: tg.matmul and tg.linear.

`tilegrid::matmul` is a torch.library custom op (with a fake kernel, so torch.compile traces
it as one node) and has autograd: both gradients are again products of the three layouts a
linear layer uses, computed by the same kernels. On an H100/H200 it runs CUTLASS's Hopper
kernels (TMA, wgmma, warp specialization); on other GPUs a portable kernel that is correct
but not tuned; on the CPU a float32 reference. `describe_matmul` says which.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._torch import current_stream, dlpack


def _product(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
    _C.matmul(dlpack(a), dlpack(b), dlpack(out), current_stream(a))
    return out


@torch.library.custom_op("tilegrid::matmul", mutates_args=())
def _matmul_op(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype]) -> torch.Tensor:
    return _product(a, b, out_dtype or a.dtype)


@_matmul_op.register_fake
def _(a, b, out_dtype):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)


def _setup_context(ctx, inputs, output):
    a, b, _ = inputs
    ctx.save_for_backward(a, b)


def _backward(ctx, grad):
    """da = grad b^T and db = a^T grad, each a product of the supported layouts whose
    contiguous dimensions the forward has already checked: da is computed transposed
    (da^T = b grad^T, [K, M]) when K is not a multiple of 8, which the forward allows only
    for an M-contiguous a; db is computed transposed (db^T = grad^T a) when b is a transposed
    view, so that a weight's gradient comes out in the weight's own layout. A float32
    gradient (out_dtype=float32) is rounded to the operands' dtype first, as mixed-precision
    training does."""
    a, b = ctx.saved_tensors
    grad = grad.to(a.dtype).contiguous()
    da = db = None
    if ctx.needs_input_grad[0]:
        if a.shape[1] % 8 == 0:
            da = _matmul_op(grad, b.t(), None)
        else:
            da = _matmul_op(b, grad.t(), None).t()
    if ctx.needs_input_grad[1]:
        if b.stride(1) == 1 or b.shape[1] <= 1:
            db = _matmul_op(a.t(), grad, None)
        else:
            db = _matmul_op(grad.t(), a, None).t()
    return da, db, None


_matmul_op.register_autograd(_backward, setup_context=_setup_context)


def matmul(
    a: torch.Tensor, b: torch.Tensor, *, out_dtype: Optional[torch.dtype] = None
) -> torch.Tensor:
    """a @ b for 2-D float16/bfloat16 tensors with float32 accumulation, as torch.mm(a, b,
    out_dtype=...). out_dtype: a's dtype (default) or torch.float32.

    a and b may be row-major or transposed views (x @ w.t(), dy @ w, dy.t() @ x), not both
    transposed; dimensions along which an operand is contiguous, and the output's columns,
    must be multiples of 8 and the data 16-byte aligned. Rows of the output are free: a
    linear layer may have any number of tokens.
    """
    return _matmul_op(a, b, out_dtype)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.t() over the last dimension of x, as torch.nn.functional.linear(x, weight)
    without a bias: x [..., in_features], weight [out_features, in_features]."""
    rows = x.reshape(-1, x.shape[-1])
    return matmul(rows, weight.t()).reshape(*x.shape[:-1], weight.shape[0])


def describe_matmul(
    a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype] = None, kernel: str = "auto"
) -> str:
    """The kernel matmul(a, b, out_dtype=out_dtype) would run, as text, e.g. 'sm90
    cooperative 128x256x64 cluster 2x1' or 'cpu reference (blocked, float32 accumulation)'.
    The arguments are checked as matmul checks them; nothing is computed.

    Args:
        a: The left operand, as for matmul.
        b: The right operand, as for matmul.
        out_dtype: The output's dtype, as for matmul; None: a's dtype.
        kernel: "auto" (the kernel matmul picks), or one to force: "sm90_cooperative",
            "sm90_pingpong" (Hopper's CUTLASS kernels) or "portable". Forcing one on a device
            that cannot run it raises; the CPU takes "auto" only.
    """
    out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype, device=a.device)
    return _C.describe_matmul(a.detach(), b.detach(), out, kernel)
