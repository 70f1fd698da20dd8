"""Linear layer + cross-entropy without the whole logits tensor in memory:

    loss = tg.linear_cross_entropy(hidden, lm_head.weight, labels)      # F.linear then F.cross_entropy
    loss_fn = tg.nn.LinearCrossEntropyLoss(ignore_index=-100)           # Liger's argument order:
    loss = loss_fn(lm_head.weight, hidden, labels)                      # (weight, input, target)

The tokens are taken in chunks of `chunk_size` rows (default: a multiple of 128 rows whose logits
take at most 1 GiB, 4096 rows at Llama-3's vocabulary of 128256 in bfloat16). For each chunk:
  1. logits = x W^T, tg.matmul into one reused buffer in the input's dtype;
  2. tilegrid's cross-entropy row kernel (tilegrid/fusion/cross_entropy.h) reads each row twice
     and writes it once: the rows' losses, and (softmax - one-hot) * scale over the logits, the
     scale being 1 / (rows not ignored) for the mean;
  3. d x = d logits W (tg.matmul), and d W += d logits^T x: on CUDA cuBLAS's product
     accumulating into d W in W's dtype (torch's addmm_: tg.matmul has no accumulating form
     yet), on the CPU tg.matmul and an add.
Both gradients are formed in the forward, while the chunk is in memory, as Liger's fused linear
cross-entropy does; the backward scales them by the incoming gradient, in place (so a graph
through this op can be run backward once; in eager mode a second time raises). d W is summed over the chunks
in W's dtype (as Liger by default): one rounding a chunk, 2 chunks at 8192 tokens by default.
Extra memory: one chunk of logits, d x and d W. float16 is the exception: the row kernel
writes the logits' gradient times 2^15 (not divided by the token count, which would push small
probabilities below float16's range) and d x, d W are summed in float32, scaled and rounded to
float16 in the backward (twice d W's memory; this float16 path is tested on the CPU and an
H200, not timed).

Measured on an H200 (Llama-3's LM head, T = 8192, bf16, forward + backward, chunks of 4096):
42.2 ms against 37.7 ms for the three products alone on cuBLAS, 39.4 ms for torch.compile,
49.1 ms eager and 55.0 ms for Liger-Kernel 0.8.5, with 2.0 GiB allocated beyond the inputs
(1.0 GiB beyond the two gradients) where compile takes 3.0 GiB and eager 11.7 GiB
(bench/results/2026-12-04_h200_linear_cross_entropy_final.json).

ignore_index rows add nothing and count for nothing in the mean (all ignored: NaN, as torch);
the gradients that autograd will not ask for are not formed; reduction "mean" or "sum";
label_smoothing must be 0. float16 or bfloat16 input and weight of one dtype (tg.matmul's
types), on the CPU (tilegrid's reference kernels) or any CUDA GPU (Hopper's GEMM kernels on an
H100/H200, the portable ones elsewhere).
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._torch import current_stream, dlpack
from .cross_entropy import (check_arguments, check_target_range, claim_the_backward, loss_scale,
                            reduce_rows)

# The default chunk: as many rows, a multiple of the products' 128-row tile, as make one chunk's
# logits at most 1 GiB (4096 rows at Llama-3's LM head in bfloat16). Measured on an H200 at T =
# 8192, V = 128256, d = 4096: 1024 / 2088 / 4096 / 8192 rows a chunk took 73.4 / 57.4 / 43.3 /
# 42.6 ms (bench/results/2026-12-03_h200_linear_cross_entropy_row_kernel.json).
_LOGITS_BYTES = 1 << 30
_TILE_ROWS = 128


def _chunk_rows(rows: int, vocab: int, itemsize: int, chunk_size: Optional[int]) -> int:
    if chunk_size is not None:
        if chunk_size < 1:
            raise ValueError(f"linear_cross_entropy: chunk_size must be >= 1, got {chunk_size}")
        return chunk_size
    budget = max(_TILE_ROWS, _LOGITS_BYTES // (itemsize * vocab) // _TILE_ROWS * _TILE_ROWS)
    return max(1, min(rows, budget))


# float16 gradients: the row kernel writes (softmax - one-hot) * 2^15 (at most 2^15 in size,
# below float16's 65504), not divided by the token count, and the two gradient products
# accumulate into float32. Divided by the count in float16, a probability of 1e-5 over 8192
# tokens (1.2e-9) would be below float16's smallest subnormal (6e-8) and vanish: the gradient
# rows of words no token targets would be lost. The backward applies scale / 2^15.
_FLOAT16_GRAD_SCALE = 2.0**15


def _accumulate_weight_grad(dw: torch.Tensor, dlogits: torch.Tensor, x: torch.Tensor, first: bool,
                            stream: int) -> None:
    """dw (+)= dlogits^T x in dw's dtype (the operands' dtype or float32)."""
    if dw.is_cuda and dw.dtype == torch.float32:  # float16 operands: dw starts at zero
        torch.addmm(dw, dlogits.t(), x, out_dtype=torch.float32, out=dw)
    elif dw.is_cuda:
        if first:
            torch.mm(dlogits.t(), x, out=dw)
        else:
            dw.addmm_(dlogits.t(), x)
    elif first:
        _C.matmul(dlpack(dlogits.t()), dlpack(x), dlpack(dw), stream)
    else:
        part = torch.empty_like(dw)
        _C.matmul(dlpack(dlogits.t()), dlpack(x), dlpack(part), stream)
        dw += part


@torch.library.custom_op("tilegrid::linear_cross_entropy", mutates_args=())
def _linear_cross_entropy_op(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                             ignore_index: int, mean: bool, chunk_rows: int, want_dx: bool,
                             want_dw: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                     torch.Tensor]:
    """The loss (reduced); d loss / d x and d loss / d weight (empty when not wanted) times
    1 / factor; and that factor, [1] float32: 1 for bfloat16, where the gradients come out in
    the operands' dtype, and 2^15 / scale for float16, where they come out in float32 (see
    _FLOAT16_GRAD_SCALE). One custom op for the whole chunk loop: torch.compile sees one node,
    and the mean's divisor stays a device tensor (nothing is read back to the host)."""
    T, V = x.shape[0], weight.shape[0]
    stream = current_stream(x)
    count, scale = loss_scale(target, ignore_index, mean)
    half = x.dtype == torch.float16
    kernel_scale = torch.full_like(scale, _FLOAT16_GRAD_SCALE) if half else scale
    factor = kernel_scale / scale if half else torch.ones_like(scale)
    grad_dtype = torch.float32 if half else x.dtype
    want_grad = want_dx or want_dw
    row_loss = torch.empty(T, dtype=torch.float32, device=x.device)
    dx = torch.empty_like(x, dtype=grad_dtype) if want_dx else x.new_empty(0)
    # d W is written by the first chunk's product; the float16 path accumulates from zero (its
    # float32 addmm, the form measured before on an H200), as does an empty batch.
    dw = ((torch.empty_like(weight) if T and not half else torch.zeros_like(weight, dtype=grad_dtype))
          if want_dw else weight.new_empty(0))
    buffer = torch.empty(min(chunk_rows, T), V, dtype=x.dtype, device=x.device)
    for i, start in enumerate(range(0, T, chunk_rows)):
        xc = x[start:start + chunk_rows]
        n = xc.shape[0]
        logits = buffer[:n]
        _C.matmul(dlpack(xc), dlpack(weight.t()), dlpack(logits), stream)
        _C.cross_entropy_loss_and_grad(dlpack(logits), dlpack(target[start:start + n]), ignore_index,
                                       dlpack(row_loss[start:start + n]),
                                       dlpack(kernel_scale) if want_grad else None, stream)
        if want_dx:
            _C.matmul(dlpack(logits), dlpack(weight), dlpack(dx[start:start + n]), stream)
        if want_dw:
            _accumulate_weight_grad(dw, logits, xc, i == 0, stream)
    return reduce_rows(row_loss, count, scale, mean), dx, dw, factor


@_linear_cross_entropy_op.register_fake
def _(x, weight, target, ignore_index, mean, chunk_rows, want_dx, want_dw):
    grad_dtype = torch.float32 if x.dtype == torch.float16 else x.dtype
    return (x.new_empty((), dtype=torch.float32),
            torch.empty_like(x, dtype=grad_dtype) if want_dx else x.new_empty(0),
            torch.empty_like(weight, dtype=grad_dtype) if want_dw else weight.new_empty(0),
            x.new_empty(1, dtype=torch.float32))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, target, ignore_index, reduction, chunk_rows):
        want_dx, want_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        loss, dx, dw, factor = _linear_cross_entropy_op(x, weight, target, ignore_index,
                                                        reduction == "mean", chunk_rows, want_dx, want_dw)
        ctx.save_for_backward(dx, dw, factor)
        ctx.wants = (want_dx, want_dw)
        ctx.dtypes = (x.dtype, weight.dtype)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        """Scales the gradients formed in the forward: in place for bfloat16 (no second d W in
        memory), from float32 into float16 for float16."""
        claim_the_backward(ctx, "linear_cross_entropy")
        dx, dw, factor = ctx.saved_tensors
        want_dx, want_dw = ctx.wants
        g = grad_loss.float()
        if ctx.dtypes[0] == torch.float16:
            g = g / factor[0]
            gx = (dx * g).to(ctx.dtypes[0]) if want_dx else None
            gw = (dw * g).to(ctx.dtypes[1]) if want_dw else None
        else:
            gx = dx.mul_(g) if want_dx else None
            gw = dw.mul_(g) if want_dw else None
        return gx, gw, None, None, None, None


def linear_cross_entropy(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         ignore_index: int = -100, reduction: str = "mean",
                         label_smoothing: float = 0.0, chunk_size: Optional[int] = None) -> torch.Tensor:
    """F.cross_entropy(F.linear(input, weight), target, ...) without the logits in memory.

    The rows of input are taken chunk_size at a time: one chunk's logits, their loss and both
    gradients are formed in the forward (see the module's text), and the backward scales the
    gradients by the incoming one, once. Differentiable in input and weight.

    Args:
        input: Hidden states [..., d], float16 or bfloat16, on the CPU or a CUDA GPU.
        weight: The output layer's weight [V, d] (no bias), input's dtype and device; V and d
            multiples of 8 (tg.matmul's requirement), V >= 8.
        target: int64 class indices [...], one a row of input, each in [0, V) or equal to
            ignore_index.
        ignore_index: Rows whose target is this value add nothing to the loss and are not
            counted in the mean. Default -100.
        reduction: "mean" (default; NaN when every row is ignored) or "sum".
        label_smoothing: Must be 0.0 (other values raise NotImplementedError).
        chunk_size: Rows a chunk. None: as many rows, a multiple of 128, as make one chunk's
            logits at most 1 GiB (at least 128, at most the number of rows).

    Returns:
        The scalar loss, float32.
    """
    ignore_index = check_arguments("linear_cross_entropy", ignore_index, input=input,
                                   weight=weight, target=target)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")
    if label_smoothing != 0.0:
        raise NotImplementedError("linear_cross_entropy: label_smoothing must be 0.0 (not implemented)")
    if weight.dim() != 2 or input.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy: input [..., d] and weight [V, d] expected, got "
                         f"{list(input.shape)} and {list(weight.shape)}")
    if input.dtype not in (torch.float16, torch.bfloat16) or weight.dtype != input.dtype:
        raise TypeError(f"linear_cross_entropy: input and weight must both be float16 or bfloat16, got "
                        f"{input.dtype} and {weight.dtype}")
    if input.device != weight.device or target.device != input.device:
        raise ValueError(f"linear_cross_entropy: input, weight and target must be on one device, got "
                         f"{input.device}, {weight.device} and {target.device}")
    x = input.reshape(-1, input.shape[-1]).contiguous()
    t = target.reshape(-1).contiguous()
    if t.shape[0] != x.shape[0] or t.dtype != torch.int64:
        raise ValueError(f"linear_cross_entropy: target must be int64 with one entry a row of input "
                         f"({x.shape[0]}), got {t.dtype} of shape {list(target.shape)}")
    if weight.shape[0] == 0 or weight.shape[0] % 8 or weight.shape[1] % 8:
        raise ValueError(f"linear_cross_entropy: vocabulary and hidden sizes must be multiples of 8 "
                         f"(tg.matmul), the vocabulary not empty, got weight {list(weight.shape)}")
    check_target_range("linear_cross_entropy", t, ignore_index, weight.shape[0])
    rows = _chunk_rows(x.shape[0], weight.shape[0], x.element_size(), chunk_size)
    return _LinearCrossEntropy.apply(x, weight.contiguous(), t, ignore_index, reduction, rows)


class LinearCrossEntropyLoss(torch.nn.Module):
    """Liger's LigerFusedLinearCrossEntropyLoss interface over tg.linear_cross_entropy:
    forward(lin_weight, _input, target) -> loss, the LM head's weight first.

    Args:
        ignore_index: Target value whose rows are left out of the loss. Default -100.
        reduction: "mean" (default) or "sum".
        label_smoothing: Must be 0.0; the forward raises NotImplementedError otherwise.
        chunk_size: Rows a chunk; None picks one, as tg.linear_cross_entropy's.
    """

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size: Optional[int] = None):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing, self.chunk_size = label_smoothing, chunk_size

    def forward(self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(_input, lin_weight, target, self.ignore_index, self.reduction,
                                    self.label_smoothing, self.chunk_size)
