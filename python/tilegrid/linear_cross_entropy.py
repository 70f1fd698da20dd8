"""Linear layer + cross-entropy without the whole logits tensor in memory:

    loss = tg.linear_cross_entropy(hidden, lm_head.weight, labels)      # F.linear then F.cross_entropy
    loss_fn = tg.nn.LinearCrossEntropyLoss(ignore_index=-100)           # Liger's argument order:
    loss = loss_fn(lm_head.weight, hidden, labels)                      # (weight, input, target)

The tokens are taken in chunks (`chunk_size` rows, default so that a chunk's logits take about
256 MiB). For each chunk, the LM-head product's epilogue stores the chunk's logits and writes
their per-tile log-sum-exp partials (`store > row_partials(logsumexp)`), finished into the
rows' log-sum-exp. Then, while the chunk is still in memory, the loss and the chunk's
gradients are formed: d logits = softmax - one-hot (in torch, elementwise), d input = d logits
W, and d W += d logits^T input (on CUDA by torch.addmm into float32 d W, cuBLAS's product:
tg.matmul has no accumulating form yet). The backward only scales them by the incoming gradient, as
Liger's fused linear cross-entropy does. Extra memory is one chunk of logits plus float32
d W, not T x V logits. What is not yet fused: the softmax gradient is a torch elementwise pass
over the chunk, not part of an epilogue.

ignore_index rows add nothing and count for nothing in the mean (all ignored: NaN, as
torch); the gradients that autograd will not ask for are not formed; reduction "mean" or "sum";
label_smoothing must be 0. bfloat16 or float16 input and weight (tg.matmul's types); on
CUDA the fused program runs on Hopper (sm_90a, bfloat16), on the CPU its reference.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import epilogue
from .gemm import matmul

_TILE_N = 256  # the log-sum-exp partials' tile width (the compiled Hopper program's)


def _chunk_rows(vocab: int, chunk_size: Optional[int]) -> int:
    if chunk_size is not None:
        if chunk_size < 1:
            raise ValueError(f"linear_cross_entropy: chunk_size must be >= 1, got {chunk_size}")
        return chunk_size
    return max(8, min(8192, (256 << 20) // (2 * vocab)) // 8 * 8)


@torch.library.custom_op("tilegrid::accumulate_weight_grad", mutates_args=("dw",))
def _accumulate_weight_grad(dw: torch.Tensor, dlogits: torch.Tensor, x: torch.Tensor) -> None:
    """dw += dlogits^T x in float32. On CUDA through torch.addmm's float32 output from bf16/fp16
    inputs (cuBLAS, accumulating into dw: one read and one write of dw a chunk, where a
    product into a temporary and an add took three and a write; tg.matmul cannot accumulate
    into its output yet); elsewhere tg.matmul and an add. A custom op that mutates dw, so that
    torch.compile runs this same call: torch 2.11's fake kernel of addmm with out_dtype fails
    ("unsupported operand type(s) for *: 'torch.dtype' and 'FakeTensor'")."""
    if dw.is_cuda:
        torch.addmm(dw, dlogits.t(), x, out_dtype=torch.float32, out=dw)
    else:
        dw += matmul(dlogits.t(), x, out_dtype=torch.float32)


@_accumulate_weight_grad.register_fake
def _(dw, dlogits, x):
    return None


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, target, ignore_index, reduction, chunk_size):
        T, V = x.shape[0], weight.shape[0]
        valid = target != ignore_index
        # The mean's divisor as a tensor: no read back to the host (torch.compile traces it).
        count = valid.sum()
        scale = 1.0 / count.clamp_min(1).float() if reduction == "mean" else torch.ones((), device=x.device)
        want_dx, want_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        dx = torch.empty_like(x) if want_dx else None
        dw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if want_dw else None
        rows = _chunk_rows(V, chunk_size)
        tiles = (V + _TILE_N - 1) // _TILE_N
        for start in range(0, T, rows):
            xc = x[start:start + rows]
            tc, vc = target[start:start + rows], valid[start:start + rows]
            real = xc.shape[0]
            if real % 8:  # the weight-gradient product reduces over the rows: a multiple of 8
                pad = 8 - real % 8
                xc = torch.cat([xc, xc.new_zeros(pad, xc.shape[1])])
                tc = torch.cat([tc, tc.new_zeros(pad)])
                vc = torch.cat([vc, vc.new_zeros(pad)])
            logits = torch.empty(xc.shape[0], V, dtype=x.dtype, device=x.device)
            partials = torch.empty(xc.shape[0], tiles, dtype=torch.float32, device=x.device)
            epilogue.matmul(xc, weight.t(), epilogue.Program().store(logits)
                            .row_partials("logsumexp", partials, tile_n=_TILE_N))
            lse = epilogue.finish_row_partials("logsumexp", partials)
            safe = torch.where(vc, tc, torch.zeros_like(tc))  # ignored rows may hold any id
            picked = logits.gather(1, safe[:, None])[:, 0].float()
            loss += ((lse - picked) * vc).sum()
            if not (want_dx or want_dw):
                continue
            # d logits = (softmax - one-hot) * scale on valid rows, written over the logits: the
            # row's scale folded into the exponent (exp(l - lse + log s); log 0 = -inf zeroes the
            # ignored rows), one float32 pass; the target column's p - 1 formed in float32.
            row_scale = vc.float() * scale
            rows_ = torch.arange(logits.shape[0], device=x.device)
            logits.copy_(torch.exp(logits.float() - (lse - torch.log(row_scale))[:, None]))
            logits[rows_, safe] = ((torch.exp(picked - lse) - 1.0) * row_scale).to(logits.dtype)
            if want_dx:
                dx[start:start + real] = matmul(logits, weight)[:real]
            if want_dw:
                _accumulate_weight_grad(dw, logits, xc)
        ctx.save_for_backward(dx, dw)
        ctx.weight_dtype = weight.dtype
        if reduction == "mean":  # as F.cross_entropy: the mean of nothing is NaN
            return torch.where(count == 0, torch.full_like(loss, float("nan")), loss * scale)
        return loss * scale

    @staticmethod
    def backward(ctx, grad_loss):
        dx, dw = ctx.saved_tensors
        g = grad_loss.float()
        gx = (dx.float() * g).to(dx.dtype) if dx is not None else None
        gw = (dw * g).to(ctx.weight_dtype) if dw is not None else None
        return gx, gw, None, None, None, None


def linear_cross_entropy(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         ignore_index: int = -100, reduction: str = "mean",
                         label_smoothing: float = 0.0, chunk_size: Optional[int] = None) -> torch.Tensor:
    """F.cross_entropy(F.linear(input, weight), target, ...) without the logits in memory:
    input [..., d], weight [V, d] (no bias), target [...] int64 class indices."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")
    if label_smoothing != 0.0:
        raise NotImplementedError("linear_cross_entropy: label_smoothing must be 0.0 (not implemented)")
    if weight.dim() != 2 or input.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy: input [..., d] and weight [V, d] expected, got "
                         f"{list(input.shape)} and {list(weight.shape)}")
    x = input.reshape(-1, input.shape[-1]).contiguous()
    t = target.reshape(-1)
    if t.shape[0] != x.shape[0] or t.dtype != torch.int64:
        raise ValueError(f"linear_cross_entropy: target must be int64 with one entry a row of input "
                         f"({x.shape[0]}), got {t.dtype} of shape {list(target.shape)}")
    if weight.shape[0] % 8 or weight.shape[1] % 8:
        raise ValueError(f"linear_cross_entropy: vocabulary and hidden sizes must be multiples of 8 "
                         f"(tg.matmul), got weight {list(weight.shape)}")
    # The targets' range is checked in eager mode (a read back to the host); under
    # torch.compile it is not: an out-of-range id there indexes out of bounds (on CUDA a
    # device-side assert), as it does in F.cross_entropy.
    valid = t[t != ignore_index] if not torch.compiler.is_compiling() else t[:0]
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= weight.shape[0]):
        raise ValueError(f"linear_cross_entropy: targets must be in [0, {weight.shape[0]}) or "
                         f"ignore_index ({ignore_index}), got {int(valid.min())} .. {int(valid.max())}")
    return _LinearCrossEntropy.apply(x, weight, t, ignore_index, reduction, chunk_size)


class LinearCrossEntropyLoss(torch.nn.Module):
    """Liger's LigerFusedLinearCrossEntropyLoss interface: forward(lin_weight, _input, target)
    -> loss, the LM head's weight first. See linear_cross_entropy."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size: Optional[int] = None):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing, self.chunk_size = label_smoothing, chunk_size

    def forward(self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(_input, lin_weight, target, self.ignore_index, self.reduction,
                                    self.label_smoothing, self.chunk_size)
