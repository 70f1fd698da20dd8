"""RMSNorm as a PyTorch op: y = x * rsqrt(mean(x**2, -1) + eps) * weight.

Two layers, as FlashAttention's PyTorch front end has them:
- custom ops `tilegrid::rms_norm_forward` / `tilegrid::rms_norm_backward`
  (torch.library.custom_op, with fake kernels), which torch.compile traces as single nodes;
- an autograd.Function that ties them together. In eager mode it calls the C++ kernels
  directly: going through the dispatcher twice per call (custom op with registered autograd)
  cost more CPU time than the GPU spends on a [32768, 4096] bf16 forward+backward.
The C++ kernels run on the CPU or the GPU, depending on where x lives.
"""

from __future__ import annotations

import numbers
from typing import Optional

import torch

from . import _C
from ._torch import current_stream, dlpack


def _forward_impl(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float):
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    _C.rms_norm_forward(dlpack(x), dlpack(weight), eps, dlpack(y), dlpack(rstd), current_stream(x))
    return y, rstd


def _backward_impl(dy, x, weight, rstd, dresidual=None):
    dy = dy.contiguous()  # autograd may hand us expanded or strided gradients
    if dresidual is not None:
        dresidual = dresidual.contiguous()
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = torch.empty_like(weight) if weight is not None else x.new_empty(0)
    _C.rms_norm_backward(
        dlpack(dy), dlpack(x), dlpack(weight), dlpack(rstd), dlpack(dx),
        dlpack(dweight) if weight is not None else None, current_stream(x), dlpack(dresidual)
    )
    return dx, dweight


@torch.library.custom_op("tilegrid::rms_norm_forward", mutates_args=())
def rms_norm_forward(
    x: torch.Tensor, weight: Optional[torch.Tensor], eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (y, rstd); rstd (float32, x's shape without the last dim) feeds the backward."""
    return _forward_impl(x, weight, eps)


@rms_norm_forward.register_fake
def _(x, weight, eps):
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    return y, x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("tilegrid::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], rstd: torch.Tensor,
    dresidual: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (dx, dweight); dweight is an empty tensor when weight is None. dresidual, when
    given, is added to dx in the same pass."""
    return _backward_impl(dy, x, weight, rstd, dresidual)


@rms_norm_backward.register_fake
def _(dy, x, weight, rstd, dresidual=None):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    return dx, torch.empty_like(weight) if weight is not None else x.new_empty(0)


def _tracing(t: torch.Tensor) -> bool:
    """True under torch.compile / export (fake or functional tensors): use the custom ops."""
    return torch.compiler.is_compiling() or type(t) is not torch.Tensor


def _forward_either(x, weight, eps):
    """The custom op under tracing, the C++ call directly in eager mode."""
    return rms_norm_forward(x, weight, eps) if _tracing(x) else _forward_impl(x, weight, eps)


def _backward_either(dy, x, weight, rstd, dresidual=None):
    if _tracing(dy):
        dx, dweight = rms_norm_backward(dy, x, weight, rstd, dresidual)
    else:
        dx, dweight = _backward_impl(dy, x, weight, rstd, dresidual)
    return dx, (dweight if weight is not None else None), None


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = _forward_either(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _backward_either(dy, *ctx.saved_tensors)


class _RMSNormKeepInputFunction(torch.autograd.Function):
    """(norm(x), x): x comes back as a view, for a residual connection around the norm
    (h = x + f(norm(x))); the gradient that reaches that view is added to dx inside the norm's
    backward kernel instead of by autograd's accumulation (one pass over [rows, H] less)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = _forward_either(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y, x.view_as(x)

    @staticmethod
    def backward(ctx, dy, dresidual):
        return _backward_either(dy, *ctx.saved_tensors, dresidual)


def rms_norm_keep_input(x: torch.Tensor, weight: Optional[torch.Tensor],
                        eps: Optional[float] = None):
    """(rms_norm(x, weight, eps), x as a view) whose backward adds the view's gradient to x's
    in the norm's own pass: for a pre-norm residual block, h = x_view + f(y)."""
    eps = _check_arguments("rms_norm_keep_input", x, weight, eps)
    if x.shape[-1] == 0:
        return _empty_rows(x, weight), x.view_as(x)
    return _RMSNormKeepInputFunction.apply(_rows(x), weight, eps)


def rms_norm(
    x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: Optional[float] = None
) -> torch.Tensor:
    """RMSNorm over the last dimension of `x`, as torch.nn.functional.rms_norm(x, (H,),
    weight, eps). `eps=None` picks torch's default (float32's machine epsilon for float16 and
    bfloat16 inputs, whose math runs in float32).

    x: float32/float16/bfloat16, any layout (copied to a contiguous one where its rows do not
    have one stride, as the kernels read them); weight: [H] in x's dtype or float32. The
    output has x's dtype; elementwise math is float32. A row's sum of squares is float32 on
    the GPU, as torch's (values of magnitude above about 1e19 overflow it, giving zeros; a row
    of values below about 1e-19 underflows it, giving inf with eps=0), and float64 on the CPU.
    A row holding +-inf gives 0 for its finite values and NaN for the infinite ones on both
    devices (x / inf, as torch's CPU kernel; torch's CUDA kernel makes the whole row NaN).
    A hidden size of 0 gives an empty output, as torch's.
    """
    eps = _check_arguments("rms_norm", x, weight, eps)
    if x.shape[-1] == 0:
        return _empty_rows(x, weight)
    return _RMSNormFunction.apply(_rows(x), weight, eps)


_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_arguments(op: str, x, weight, eps) -> float:
    """The Python-side checks (the C++ ones follow): kinds, dtypes the DLPack conversion
    takes (an int16 x would fail there naming no argument), weight on x's device; returns eps
    (torch's default for None)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{op}: x must be float32, float16 or bfloat16, got {_name(x.dtype)}")
    if x.dim() == 0:
        raise ValueError(f"{op}: x must be [..., H], got a 0-d tensor")
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{op}: weight must be a torch.Tensor or None, got {type(weight).__name__}")
        if weight.dtype not in _DTYPES:
            allowed = " or ".join(dict.fromkeys((_name(x.dtype), "float32")))
            raise TypeError(f"{op}: weight must be {allowed}, got {_name(weight.dtype)}")
        if weight.device != x.device:
            raise ValueError(f"{op}: weight is on {weight.device} but x is on {x.device}")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, numbers.Real)):
        raise TypeError(f"{op}: eps must be a float or None, got {type(eps).__name__} ({eps!r})")
    return default_eps(x, eps)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x when its last dimension is contiguous and its leading ones flatten into rows of one
    stride (what the kernels read), else a contiguous copy (differentiable)."""
    if x.stride(-1) != 1:
        return x.contiguous()
    expected = None
    for size, stride in reversed(list(zip(x.shape[:-1], x.stride()[:-1]))):
        if size == 1:
            continue
        if expected is not None and stride != expected:
            return x.contiguous()
        expected = stride * size
    return x


def _empty_rows(x: torch.Tensor, weight: Optional[torch.Tensor]) -> torch.Tensor:
    """RMSNorm over a hidden size of 0: an empty output of x's shape (differentiable)."""
    if weight is not None and weight.shape != (0,):
        raise ValueError(f"rms_norm: weight must have shape [0] for x of shape {list(x.shape)}, got "
                         f"{list(weight.shape)}")
    return x * 1 if weight is None else (x * weight).to(x.dtype)


def default_eps(x: torch.Tensor, eps: Optional[float]) -> float:
    """eps, or torch.nn.functional.rms_norm's default for x when it is None."""
    if eps is None:
        # torch takes eps of the type it computes in: float32 for half-precision inputs.
        compute_dtype = torch.promote_types(x.dtype, torch.float32)
        eps = torch.finfo(compute_dtype).eps if compute_dtype.is_floating_point else 0.0
    return float(eps)
