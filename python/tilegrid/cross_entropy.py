"""Cross-entropy over logits with the gradient formed in the forward, as F.cross_entropy:

    loss = tg.cross_entropy(logits, labels)                 # logits [N, C], labels [N] int64
    loss = tg.nn.CrossEntropyLoss(ignore_index=-100)(logits, labels)

One pass of tilegrid's cross-entropy row kernel (tilegrid/fusion/cross_entropy.h) gives each
row's loss and, when autograd will ask for it, the logits' gradient (softmax - one-hot) *
scale in the logits' dtype (float32 for float16 logits, whose range would lose small
probabilities), written into one copy of the logits: no float32 softmax or log-softmax is kept
for the backward, which only scales that gradient by the incoming one, in place (so a graph
through this op runs backward once; in eager mode a second time raises; no double backward).
The math is float32 (the CPU reference sums in float64); the loss is returned in the logits'
dtype, as torch returns it.

As F.cross_entropy: ignore_index rows add nothing and count for nothing in the mean (all
ignored: NaN); reduction "mean", "sum" or "none". Not supported (they raise): class weights,
label_smoothing != 0, class-probability targets, logits of more than 2 dimensions. float32,
float16 or bfloat16 logits on the CPU or a CUDA GPU.
"""

from __future__ import annotations

import operator

import torch

from . import _C
from ._torch import current_stream, dlpack

_REDUCTIONS = ("mean", "sum", "none")


def check_arguments(op: str, ignore_index, **tensors) -> int:
    """Raises a TypeError unless each of `tensors` is a torch.Tensor and ignore_index an
    integer (Python, numpy or torch; not a bool, which torch's schema would refuse with a
    RuntimeError, nor a float) within int64 (past it, a ValueError, not OverflowError).
    Returns ignore_index as an int."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    try:
        if isinstance(ignore_index, bool):
            raise TypeError
        value = operator.index(ignore_index)
    except TypeError:
        raise TypeError(f"{op}: ignore_index must be an int, got {type(ignore_index).__name__} "
                        f"({ignore_index!r})") from None
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{op}: ignore_index must fit int64 (the targets' type), got {value}")
    return value


def check_target_range(op: str, target: torch.Tensor, ignore_index: int, classes: int) -> None:
    """Raises unless every target is ignore_index or in [0, classes). In eager mode only: it
    reads the targets back to the host, which torch.compile does not trace; there an
    out-of-range id gives its row a NaN loss (the row kernel never reads outside the row)."""
    if torch.compiler.is_compiling():
        return
    valid = target[target != ignore_index]
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= classes):
        raise ValueError(f"{op}: targets must be in [0, {classes}) or ignore_index ({ignore_index}), "
                         f"got {int(valid.min())} .. {int(valid.max())}")


def loss_scale(target: torch.Tensor, ignore_index: int, mean: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the number of rows not ignored, the [1] float32 factor of each row's loss: 1 / that
    number for the mean, else 1). Device tensors: nothing is read back to the host."""
    count = (target != ignore_index).sum()
    ones = torch.ones(1, dtype=torch.float32, device=target.device)
    return count, (1.0 / count.clamp_min(1).float()).reshape(1) if mean else ones


def reduce_rows(rows: torch.Tensor, count: torch.Tensor, scale: torch.Tensor, mean: bool) -> torch.Tensor:
    """The rows' losses summed and scaled; as F.cross_entropy, the mean of no rows is NaN."""
    loss = rows.sum() * scale[0]
    return torch.where(count == 0, torch.full_like(loss, float("nan")), loss) if mean else loss


def claim_the_backward(ctx, op: str) -> None:
    """Gradients formed in the forward are scaled in place by the backward, so it may run once
    per forward: a second run (retain_graph) raises instead of scaling them twice. Eager mode
    only: torch.compile traces the backward once and keeps no such flag."""
    if getattr(ctx, "backward_ran", False):
        raise RuntimeError(f"{op}: backward ran twice through the same graph; its gradients are "
                           f"formed in the forward and scaled in place once")
    if not torch.compiler.is_compiling():
        ctx.backward_ran = True


def _grad_dtype(dtype: torch.dtype) -> torch.dtype:
    """The gradient buffer's dtype: the logits' own, except float32 for float16, where a
    probability divided by the row count (1e-5 / 8192) would fall below float16's smallest
    subnormal (6e-8) and vanish before the backward's scale (a GradScaler's) is applied."""
    return torch.float32 if dtype == torch.float16 else dtype


@torch.library.custom_op("tilegrid::cross_entropy", mutates_args=())
def _cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str,
                      want_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss (reduced as asked, float32) and the gradient of the mean or sum (of every row's
    loss for "none"), or an empty tensor when not wanted."""
    stream = current_stream(logits)
    count, scale = loss_scale(target, ignore_index, reduction == "mean")
    rows = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
    grad = (logits.to(_grad_dtype(logits.dtype), memory_format=torch.contiguous_format, copy=True)
            if want_grad else logits.new_empty(0))
    _C.cross_entropy_loss_and_grad(dlpack(grad if want_grad else logits), dlpack(target),
                                   ignore_index, dlpack(rows), dlpack(scale) if want_grad else None,
                                   stream)
    if reduction == "none":
        return rows, grad
    return reduce_rows(rows, count, scale, reduction == "mean"), grad


@_cross_entropy_op.register_fake
def _(logits, target, ignore_index, reduction, want_grad):
    loss_shape = (logits.shape[0],) if reduction == "none" else ()
    return (logits.new_empty(loss_shape, dtype=torch.float32),
            torch.empty_like(logits, dtype=_grad_dtype(logits.dtype), memory_format=torch.contiguous_format)
            if want_grad else logits.new_empty(0))


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction):
        loss, grad = _cross_entropy_op(logits, target, ignore_index, reduction,
                                       ctx.needs_input_grad[0])
        ctx.save_for_backward(grad)
        ctx.reduction, ctx.dtype = reduction, logits.dtype
        return loss.to(logits.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        claim_the_backward(ctx, "cross_entropy")
        (grad,) = ctx.saved_tensors
        g = grad_loss.float()
        grad.mul_(g[:, None] if ctx.reduction == "none" else g)
        return grad.to(ctx.dtype), None, None, None


def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy between logits and class indices, as torch.nn.functional.cross_entropy.

    One pass of tilegrid's row kernel gives each row's loss and, when autograd will ask for
    it, the logits' gradient (see the module's text); differentiable in input, once.

    Args:
        input: Logits [N, C]: float32, float16 or bfloat16, on the CPU or a CUDA GPU. A
            contiguous last dimension is read in place; other layouts are copied.
        target: int64 class indices [N] on input's device, each in [0, C) or equal to
            ignore_index (other values raise a ValueError). Class probabilities are not
            supported.
        weight: Class weights. Must be None (a tensor raises NotImplementedError).
        ignore_index: Rows whose target is this value add nothing to the loss and are not
            counted in the mean. Default -100, as torch's.
        reduction: "mean" (default: the sum over rows not ignored divided by their number;
            NaN when every row is ignored), "sum", or "none" (the [N] per-row losses, 0 for
            ignored rows).
        label_smoothing: Must be 0.0 (label smoothing is not implemented; other values raise
            NotImplementedError).

    Returns:
        The loss in input's dtype: a scalar for "mean" and "sum", [N] for "none".
    """
    ignore_index = check_arguments("cross_entropy", ignore_index, input=input, target=target)
    if weight is not None:
        raise NotImplementedError("cross_entropy: class weights are not supported (weight must be None)")
    if label_smoothing != 0.0:
        raise NotImplementedError("cross_entropy: label_smoothing must be 0.0 (not implemented)")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if input.dim() != 2:
        raise ValueError(f"cross_entropy: input must be logits [N, C], got shape {list(input.shape)}")
    if input.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"cross_entropy: input must be float32, float16 or bfloat16, got {input.dtype}")
    if target.dtype != torch.int64 or target.shape != input.shape[:1]:
        raise ValueError(f"cross_entropy: target must be int64 class indices of shape [{input.shape[0]}], "
                         f"got {target.dtype} of shape {list(target.shape)} (class probabilities are "
                         f"not supported)")
    if target.device != input.device:
        raise ValueError(f"cross_entropy: input and target must be on one device, got {input.device} and "
                         f"{target.device}")
    if input.shape[1] == 0:
        raise ValueError("cross_entropy: input must have at least one class")
    check_target_range("cross_entropy", target, ignore_index, input.shape[1])
    strided_rows = input.stride(-1) == 1 and (input.shape[0] <= 1 or input.stride(0) >= input.shape[1])
    logits = input if strided_rows else input.contiguous()  # e.g. an expanded row: a copy
    return _CrossEntropy.apply(logits, target.contiguous(), ignore_index, reduction)


class CrossEntropyLoss(torch.nn.Module):
    """torch.nn.CrossEntropyLoss's interface over tg.cross_entropy: forward(input [N, C],
    target [N]) -> loss.

    Args:
        weight: Class weights. Must be None (a tensor raises NotImplementedError).
        ignore_index: Target value whose rows are left out of the loss. Default -100.
        reduction: "mean" (default), "sum" or "none", as tg.cross_entropy's.
        label_smoothing: Must be 0.0; the forward raises NotImplementedError otherwise.
    """

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        if weight is not None:
            raise NotImplementedError("CrossEntropyLoss: class weights are not supported (weight must be None)")
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(input, target, None, self.ignore_index, self.reduction, self.label_smoothing)
