"""Split-KV attention (FlashDecoding): each sequence's keys in parts that run as sequences of
their own in one varlen call, the parts' outputs merged by their log-sum-exps.

Decoding attends a few queries over a long cache: with one sequence's keys in one part, the
kernel has batch x heads units of work, far fewer than a GPU's SMs at small batches. With the
keys in `splits` parts, each part is its own (virtual) sequence whose queries are the
sequence's, copied, and the parts' outputs o_c and log-sum-exps l_c merge exactly:

    l = logsumexp_c l_c,   o = sum_c exp(l_c - l) o_c

(a part with no visible key has l_c = -inf and weight 0). Causal attention is aligned to the
bottom-right corner: every one of the q_len queries sees the keys before the sequence's last
q_len - 1. The parts before the last hold only such keys and run unmasked; the last part runs
causal, aligned to the sequence's end, which is the same mask. With q_len = 1 (decoding) every
part runs unmasked in one call over the keys as they lie. With causal q_len > 1 the parts are
not back to back within a call, so their keys are gathered first (seqused_k): a copy of the
cache's keys and values. Sliding windows are not split (the caller runs them whole).
"""

from __future__ import annotations

from typing import Optional

import torch

from .flash_attn import flash_attn_varlen_func


def split_bounds(counts: torch.Tensor, splits: int, seqlen_q: int, causal: bool) -> torch.Tensor:
    """int64 (batch, splits + 1) on the CPU: the key offsets where each sequence's parts start,
    and its key count last. Parts are as even as the counts allow; with causal and seqlen_q > 1
    no part but the last starts after the keys every query sees (count - seqlen_q + 1), so that
    parts before the last may be empty."""
    counts = counts.to(torch.int64).cpu()
    steps = torch.arange(splits + 1, dtype=torch.int64, device="cpu")
    bounds = counts[:, None] * steps[None, :] // splits
    if causal and seqlen_q > 1:
        seen_by_all = (counts - (seqlen_q - 1)).clamp(min=0)
        bounds[:, :splits] = torch.minimum(bounds[:, :splits], seen_by_all[:, None])
    return bounds


def _offsets(starts: torch.Tensor, total: int, device) -> torch.Tensor:
    return torch.cat([starts.reshape(-1), torch.tensor([total])]).to(torch.int32).to(device)


def _run_parts(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, starts: torch.Tensor,
               used: torch.Tensor, seqlen_q: int, causal: bool, scale, softcap: float,
               contiguous: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each sequence's queries over its parts: starts and used are (batch, parts)
    key offsets and key counts (used only where the parts are not back to back). out as
    (batch, parts, seqlen_q, heads, d), lse as (batch, parts, seqlen_q, heads)."""
    batch, parts = starts.shape
    heads, d = q.shape[1], q.shape[2]
    q_parts = q.view(batch, 1, seqlen_q, heads, d).expand(batch, parts, seqlen_q, heads, d)
    q_parts = q_parts.reshape(batch * parts * seqlen_q, heads, d)
    cu_q = torch.arange(0, batch * parts + 1, dtype=torch.int32, device=q.device) * seqlen_q
    cu_k = _offsets(starts, keys.shape[0], q.device)
    seqused_k = None if contiguous else used.reshape(-1).to(torch.int32).to(q.device)
    out, lse = flash_attn_varlen_func(
        q_parts, keys, values, cu_q, cu_k, max(seqlen_q, 1), max(int(used.max()), 1),
        softmax_scale=scale, causal=causal, softcap=softcap, return_lse=True, seqused_k=seqused_k)
    out = out.view(batch, parts, seqlen_q, heads, d)
    lse = lse.view(heads, batch, parts, seqlen_q).permute(1, 2, 3, 0)
    return out, lse


def merge_parts(out: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The parts (axis 1) merged: out (batch, seqlen_q, heads, d) in out's dtype and lse
    (batch, seqlen_q, heads), float32; rows with no visible key get 0 and -inf."""
    lse = lse.float()
    total = torch.logsumexp(lse, dim=1)
    weights = torch.exp(lse - total[:, None])
    weights = torch.where(torch.isfinite(total)[:, None], weights, torch.zeros_like(weights))
    merged = (weights[..., None] * out.float()).sum(dim=1)
    return merged.to(out.dtype), total


def attention_in_parts(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       counts: torch.Tensor, seqlen_q: int, splits: int, *, causal: bool,
                       softmax_scale: Optional[float], softcap: float
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of q (batch * seqlen_q, heads, d: seqlen_q queries a sequence) over packed keys
    and values (sequence b's counts[b] keys after sequence b - 1's), each sequence's keys in
    `splits` >= 2 parts. Returns flash_attn_varlen_func's (out, lse): out (batch * seqlen_q,
    heads, d), lse (heads, batch * seqlen_q)."""
    batch, heads, d = counts.numel(), q.shape[1], q.shape[2]
    counts = counts.to(torch.int64).cpu()
    bounds = split_bounds(counts, splits, seqlen_q, causal)
    first_key = torch.cat([torch.zeros(1, dtype=torch.int64, device="cpu"), torch.cumsum(counts, 0)[:-1]])
    starts = first_key[:, None] + bounds[:, :splits]
    lengths = bounds[:, 1:] - bounds[:, :splits]
    if not causal or seqlen_q <= 1:
        out, lse = _run_parts(q, keys, values, starts, lengths, seqlen_q, False, softmax_scale,
                              softcap, contiguous=True)
    else:
        # The parts every query sees, unmasked; the last, causal to the sequence's end. A
        # sequence's parts before the last are not back to back with the next sequence's
        # first (its last part lies between), so their key counts go as seqused_k.
        out_a, lse_a = _run_parts(q, keys, values, starts[:, :-1], lengths[:, :-1], seqlen_q,
                                  False, softmax_scale, softcap, contiguous=False)
        out_b, lse_b = _run_parts(q, keys, values, starts[:, -1:], lengths[:, -1:], seqlen_q,
                                  True, softmax_scale, softcap, contiguous=False)
        out, lse = torch.cat([out_a, out_b], dim=1), torch.cat([lse_a, lse_b], dim=1)
    merged, total = merge_parts(out, lse)
    return merged.reshape(batch * seqlen_q, heads, d), total.permute(2, 0, 1).reshape(heads, batch * seqlen_q)
