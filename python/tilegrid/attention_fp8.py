"""FP8 (e4m3) attention inputs with FlashAttention 3's descale factors.

FlashAttention 3 takes q, k and v in float8_e4m3fn with `q_descale`, `k_descale` and
`v_descale`: float32 (batch, nheads_k) factors (one a sequence and key/value head; a
per-tensor factor is a (1, 1) tensor expanded), so that the scores are
(q * q_descale) . (k * k_descale) * softmax_scale and the output is
softmax(scores) . (v * v_descale), returned in bfloat16. The forward only: FlashAttention 3
has no FP8 backward.

Here the inputs are dequantised with their factors (query head h takes its key/value head's
factor, h // (nheads / nheads_k)), and the output is rounded to bfloat16. On the CPU they are
dequantised to float32 and run through the CPU path, whose sums are float64. On a GPU they are
dequantised to bfloat16 (one elementwise pass over q, k and v) and run through the bfloat16
kernels: the results are FP8 attention's, the speed is bfloat16 attention's plus that pass.
tilegrid has no FP8 tensor-core kernel yet (FlashAttention 3 has one for Hopper).
"""

from __future__ import annotations

from typing import Optional

import torch

FP8 = torch.float8_e4m3fn


def _name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def check_fp8(op: str, q, k, v, descales: dict[str, Optional[torch.Tensor]]) -> bool:
    """Whether this is an FP8 call: q, k and v all float8_e4m3fn. Descale factors with inputs
    of another dtype, a mix of FP8 and other inputs, or an FP8 input that asks for a gradient
    raise, before anything runs."""
    tensors = {"q": q, "k": k, "v": v}
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        return False  # the usual checks name the argument
    fp8 = [name for name, t in tensors.items() if t.dtype == FP8]
    given = [name for name, d in descales.items() if d is not None]
    if not fp8:
        if given:
            raise ValueError(f"{op}: {', '.join(given)} apply to float8_e4m3fn inputs only, got q, k, v "
                             f"of {_name(q)}")
        return False
    if len(fp8) != 3:
        other = next(name for name in tensors if name not in fp8)
        raise TypeError(f"{op}: q, k and v must all be float8_e4m3fn when one is, got {fp8[0]} "
                        f"float8_e4m3fn and {other} {_name(tensors[other])}")
    if any(t.requires_grad for t in tensors.values()):
        raise NotImplementedError(f"{op}: FP8 attention is forward-only, as FlashAttention 3's: "
                                  "q, k and v must not require grad")
    return True


def check_descales(op: str, descales: dict[str, Optional[torch.Tensor]], batch: int, nheads_k: int,
                   device) -> None:
    """Each given descale is float32 (batch, nheads_k) on the inputs' device (raises if not)."""
    for name, d in descales.items():
        _factors(op, name, d, batch, nheads_k, device)


def _factors(op: str, name: str, descale, batch: int, nheads_k: int, device) -> torch.Tensor:
    """The (batch, nheads_k) float32 factors of `name` (ones when None)."""
    if descale is None:
        return torch.ones(batch, nheads_k, dtype=torch.float32, device=device)
    if not isinstance(descale, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor or None, got {type(descale).__name__}")
    if descale.dtype != torch.float32:
        raise TypeError(f"{op}: {name} must be float32, got {_name(descale)}")
    if tuple(descale.shape) != (batch, nheads_k):
        raise ValueError(f"{op}: {name} must be (batch, nheads_k) = ({batch}, {nheads_k}), got "
                         f"{list(descale.shape)}")
    if descale.device != device:
        raise ValueError(f"{op}: {name} must be on the inputs' device {device}, got {descale.device}")
    return descale


def _dequantise(x: torch.Tensor, factors: torch.Tensor, sequence_of_row: Optional[torch.Tensor],
                nheads: int) -> torch.Tensor:
    """x (batch, seqlen, heads, d) or (rows, heads, d), each head times its key/value head's
    factor (heads of a query group share one, h // (heads / nheads_k)): float32 on the CPU,
    bfloat16 on a GPU (the 16-bit type the kernels take; e4m3 values are exact in it, their
    products with the factors rounded to 8 significant bits)."""
    per_head = factors.repeat_interleave(nheads // factors.shape[1], dim=1)  # (batch, heads)
    if sequence_of_row is None:
        scaled = x.float() * per_head[:, None, :, None]
    else:
        scaled = x.float() * per_head[sequence_of_row][:, :, None]
    return scaled.to(torch.bfloat16) if x.is_cuda else scaled


def dequantise_dense(op: str, q, k, v, q_descale, k_descale, v_descale):
    """float32 q, k, v of flash_attn_func's layout, each scaled by its descale factors."""
    batch, nheads, nheads_k = q.shape[0], q.shape[2], k.shape[2]
    if k.dim() != 4 or q.dim() != 4 or nheads_k < 1 or nheads % nheads_k:
        return q.float(), k.float(), v.float()  # the usual checks name the misfit
    f = {name: _factors(op, name, d, batch, nheads_k, q.device)
         for name, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))}
    return (_dequantise(q, f["q_descale"], None, nheads), _dequantise(k, f["k_descale"], None, nheads_k),
            _dequantise(v, f["v_descale"], None, nheads_k))


def dequantise_varlen(op: str, q, k, v, cu_seqlens_q, cu_seqlens_k, q_descale, k_descale, v_descale):
    """float32 q, k, v of flash_attn_varlen_func's layout (rows of every sequence packed), each
    row scaled by its sequence's descale factors. cu_seqlens_* are validated offsets."""
    if q.dim() != 3 or k.dim() != 3 or k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        return q.float(), k.float(), v.float()
    batch, nheads, nheads_k = cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[1]
    f = {name: _factors(op, name, d, batch, nheads_k, q.device)
         for name, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))}

    def sequence_of_row(offsets: torch.Tensor, rows: int) -> torch.Tensor:
        lengths = (offsets[1:] - offsets[:-1]).long().cpu()
        if bool((lengths < 0).any()) or int(lengths.sum()) != rows:
            # Offsets that do not cover the rows: the usual checks, after this, say how.
            return torch.zeros(rows, dtype=torch.long, device=q.device)
        return torch.repeat_interleave(torch.arange(batch), lengths).to(q.device)

    rows_q, rows_k = sequence_of_row(cu_seqlens_q, q.shape[0]), sequence_of_row(cu_seqlens_k, k.shape[0])
    return (_dequantise(q, f["q_descale"], rows_q, nheads), _dequantise(k, f["k_descale"], rows_k, nheads_k),
            _dequantise(v, f["v_descale"], rows_k, nheads_k))
