"""float64 attention in torch, differentiable, the reference of the attention tests."""
import math

import torch


def reference(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0,
              dtype=torch.float64):
    """float64 attention for one sequence: q [sq, hq, d], k/v [sk, hk, d] -> out, lse [hq, sq].
    dtype=torch.bfloat16 (or float16) computes it in that type instead: "a plain torch
    implementation", FlashAttention's yardstick for a kernel's error.

    Masks as FlashAttention's: the diagonal aligned bottom-right (query i's is key
    i + sk - sq), window (left, right) keys around it, causal = right 0. A query that sees no
    key gets out 0 and lse -inf. Differentiable in q, k and v (gradients of masked rows 0)."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    sq, hq, d = q.shape
    sk, hk = k.shape[:2]
    k = k.repeat_interleave(hq // hk, dim=1)
    v = v.repeat_interleave(hq // hk, dim=1)
    scale = 1 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    diagonal = i + sk - sq
    # A side of sq + sk keys or more bounds nothing (as the kernels take it); one near 2**63
    # would also wrap in the int64 index arithmetic below.
    left, right = (-1 if w >= sq + sk else w for w in window)
    if causal:
        right = 0
    allowed = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        allowed &= j >= diagonal - left
    if right >= 0:
        allowed &= j <= diagonal + right
    seen = allowed.any(dim=-1)  # queries that see at least one key
    # Masked scores at the type's most negative finite value (exp gives exactly 0) keep the
    # softmax's gradient free of NaN; a row that sees nothing is zeroed after the softmax.
    s = s.masked_fill(~allowed, torch.finfo(dtype).min)
    p = torch.softmax(s, dim=-1) * seen[:, None]
    lse = torch.logsumexp(s, dim=-1).masked_fill(~seen, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", p, v)
    return out, lse
