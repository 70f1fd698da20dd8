"""FlashAttention 2's packed-input entry points: q, k and v stacked in one tensor
(``flash_attn_qkvpacked_func``), or k and v stacked (``flash_attn_kvpacked_func``), and their
variable-length forms. Each unpacks views and calls tg.flash_attn_func or
tg.flash_attn_varlen_func, so forward, backward (into the packed tensor) and every check are
theirs."""

from __future__ import annotations

from typing import Optional

import torch

from .flash_attn import _offsets, flash_attn_func, flash_attn_varlen_func


def _unpack(op: str, name: str, t, parts: int, dim: int):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() <= dim or t.shape[dim] != parts:
        raise ValueError(f"{op}: {name} must have {parts} at dimension {dim} "
                         f"({'q, k, v' if parts == 3 else 'k, v'}), got shape {list(t.shape)}")
    return t.unbind(dim)


def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                              return_attn_probs: bool = False):
    """flash_attn_func on q, k, v stacked: FlashAttention 2's ``flash_attn_qkvpacked_func``.

    Args:
        qkv: (batch, seqlen, 3, nheads, headdim): q, k and v at index 0, 1, 2 of dimension 2.
        dropout_p: Must be 0.0, as in flash_attn_func.
        softmax_scale: As in flash_attn_func; None: 1 / sqrt(headdim).
        causal: As in flash_attn_func.
        window_size: As in flash_attn_func.
        softcap: As in flash_attn_func.
        alibi_slopes: Must be None, as in flash_attn_func.
        deterministic: As in flash_attn_func.
        return_attn_probs: As in flash_attn_func.

    Returns:
        flash_attn_func's result; its gradient flows into qkv.
    """
    q, k, v = _unpack("flash_attn_qkvpacked_func", "qkv", qkv, 3, 2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False, window_size=(-1, -1),
                             softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                             deterministic: bool = False, return_attn_probs: bool = False):
    """flash_attn_func with k and v stacked: FlashAttention 2's ``flash_attn_kvpacked_func``.

    Args:
        q: (batch, seqlen_q, nheads, headdim), as in flash_attn_func.
        kv: (batch, seqlen_k, 2, nheads_k, headdim): k and v at index 0 and 1 of dimension 2.
        dropout_p: Must be 0.0, as in flash_attn_func.
        softmax_scale: As in flash_attn_func; None: 1 / sqrt(headdim).
        causal: As in flash_attn_func (bottom-right aligned).
        window_size: As in flash_attn_func.
        softcap: As in flash_attn_func.
        alibi_slopes: Must be None, as in flash_attn_func.
        deterministic: As in flash_attn_func.
        return_attn_probs: As in flash_attn_func.

    Returns:
        flash_attn_func's result; its gradient flows into q and kv.
    """
    k, v = _unpack("flash_attn_kvpacked_func", "kv", kv, 2, 2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                     causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                                     alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                                     return_attn_probs: bool = False):
    """flash_attn_varlen_func on q, k, v stacked: FlashAttention 2's
    ``flash_attn_varlen_qkvpacked_func``.

    Args:
        qkv: (total, 3, nheads, headdim): q, k and v at index 0, 1, 2 of dimension 1.
        cu_seqlens: int32 (batch + 1,): sequence offsets, for q and for k and v.
        max_seqlen: The longest sequence (at least that).
        dropout_p: Must be 0.0, as in flash_attn_varlen_func.
        softmax_scale: As in flash_attn_varlen_func; None: 1 / sqrt(headdim).
        causal: As in flash_attn_varlen_func.
        window_size: As in flash_attn_varlen_func.
        softcap: As in flash_attn_varlen_func.
        alibi_slopes: Must be None, as in flash_attn_varlen_func.
        deterministic: As in flash_attn_varlen_func.
        return_attn_probs: As in flash_attn_varlen_func.

    Returns:
        flash_attn_varlen_func's result; its gradient flows into qkv.
    """
    op = "flash_attn_varlen_qkvpacked_func"
    cu_seqlens = _offsets(op, "cu_seqlens", cu_seqlens)
    q, k, v = _unpack(op, "qkv", qkv, 3, 1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                    causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                                    alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                                    return_attn_probs: bool = False):
    """flash_attn_varlen_func with k and v stacked: FlashAttention 2's
    ``flash_attn_varlen_kvpacked_func``.

    Args:
        q: (total_q, nheads, headdim), as in flash_attn_varlen_func.
        kv: (total_k, 2, nheads_k, headdim): k and v at index 0 and 1 of dimension 1.
        cu_seqlens_q: int32 (batch + 1,): the queries' sequence offsets.
        cu_seqlens_k: int32 (batch + 1,): the keys' and values' sequence offsets.
        max_seqlen_q: The longest sequence's number of queries (at least that).
        max_seqlen_k: The longest sequence's number of keys (at least that).
        dropout_p: Must be 0.0, as in flash_attn_varlen_func.
        softmax_scale: As in flash_attn_varlen_func; None: 1 / sqrt(headdim).
        causal: As in flash_attn_varlen_func.
        window_size: As in flash_attn_varlen_func.
        softcap: As in flash_attn_varlen_func.
        alibi_slopes: Must be None, as in flash_attn_varlen_func.
        deterministic: As in flash_attn_varlen_func.
        return_attn_probs: As in flash_attn_varlen_func.

    Returns:
        flash_attn_varlen_func's result; its gradient flows into q and kv.
    """
    op = "flash_attn_varlen_kvpacked_func"
    cu_seqlens_q = _offsets(op, "cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k = _offsets(op, "cu_seqlens_k", cu_seqlens_k)
    k, v = _unpack(op, "kv", kv, 2, 1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)
