"""FlashAttention 3's ``seqused_q`` / ``seqused_k``: only the first rows of each sequence used.

Sequence b still spans rows cu_seqlens[b] to cu_seqlens[b + 1] of its tensor, but only its
first seqused[b] rows take part: the other keys are not attended to, and the other queries'
output rows are 0 (lse -inf) with no gradient. The kernels read packed sequences, so the
used rows are gathered into packed rows first (one copy of them) and the outputs placed back.
"""

from __future__ import annotations

from typing import Optional

import torch


def used_rows(op: str, name: str, seqused, cu_seqlens: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor, int]]:
    """(row indices, packed offsets, longest used length) of the used rows, or None for all.

    seqused must be an int32 (batch,) tensor on cu_seqlens' device with 0 <= seqused[b] <=
    cu_seqlens[b + 1] - cu_seqlens[b]; checked before anything is read.
    """
    if seqused is None:
        return None
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.numel() == 0:
        got = list(cu_seqlens.shape) if isinstance(cu_seqlens, torch.Tensor) else type(cu_seqlens).__name__
        raise TypeError(f"{op}: with {name}, the sequences' offsets must be a tensor (batch + 1,), got {got}")
    batch = cu_seqlens.numel() - 1
    if not isinstance(seqused, torch.Tensor) or seqused.dtype != torch.int32 or tuple(seqused.shape) != (batch,):
        got = (f"{seqused.dtype} of shape {list(seqused.shape)}" if isinstance(seqused, torch.Tensor)
               else type(seqused).__name__)
        raise TypeError(f"{op}: {name} must be an int32 tensor ({batch},), got {got}")
    if seqused.device != cu_seqlens.device:
        raise ValueError(f"{op}: {name} must be on {cu_seqlens.device}, got {seqused.device}")
    used_h = seqused.cpu().to(torch.int64)
    offsets_h = cu_seqlens.cpu().to(torch.int64)
    lengths_h = offsets_h[1:] - offsets_h[:-1]
    bad = (used_h < 0) | (used_h > lengths_h)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        raise ValueError(f"{op}: {name}[{b}] = {int(used_h[b])} is outside [0, {int(lengths_h[b])}], the "
                         f"rows of sequence {b}")
    seq, position, packed = ragged_rows(seqused.to(torch.int64), int(used_h.sum()))
    rows = offsets_h.to(cu_seqlens.device)[:-1][seq] + position
    return rows, packed, int(used_h.max()) if batch else 0


def ragged_rows(counts: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of sequences of counts[b] rows each (int64, on their device), packed one after
    another: each packed row's sequence and its position in it, and the int32 offsets
    (batch + 1,) from 0. total is counts' sum (known on the host by the caller)."""
    batch = counts.numel()
    seq = torch.repeat_interleave(torch.arange(batch, device=counts.device), counts, output_size=total)
    offsets = torch.zeros(batch + 1, dtype=torch.int32, device=counts.device)
    offsets[1:] = counts.cumsum(0)
    position = torch.arange(total, device=counts.device) - offsets[:-1].to(torch.int64)[seq]
    return seq, position, offsets


def offsets_of(op: str, name: str, counts) -> torch.Tensor:
    """int32 offsets (batch + 1,) from 0 of an int32 (batch,) tensor of non-negative counts."""
    if not isinstance(counts, torch.Tensor) or counts.dtype != torch.int32 or counts.dim() != 1:
        got = (f"{counts.dtype} of shape {list(counts.shape)}" if isinstance(counts, torch.Tensor)
               else type(counts).__name__)
        raise TypeError(f"{op}: {name} must be an int32 tensor (batch,), got {got}")
    if bool((counts < 0).any()):
        raise ValueError(f"{op}: {name} must be >= 0, got {counts.tolist()}")
    offsets = torch.zeros(counts.numel() + 1, dtype=torch.int32, device=counts.device)
    offsets[1:] = counts.cumsum(0)
    return offsets


def place_back(out: torch.Tensor, lse: torch.Tensor, rows: torch.Tensor, total_q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """out (used, heads, d) and lse (heads, used) at their rows of (total_q, ...) tensors whose
    other rows are 0 and -inf."""
    full_out = out.new_zeros((total_q,) + tuple(out.shape[1:])).index_copy(0, rows, out)
    full_lse = lse.new_full((lse.shape[0], total_q), float("-inf")).index_copy(1, rows, lse)
    return full_out, full_lse
