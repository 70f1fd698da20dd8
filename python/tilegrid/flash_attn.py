"""Exact attention with FlashAttention's Python interface.

    out = tg.flash_attn_func(q, k, v, causal=True)            # (batch, seqlen, heads, headdim)
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, return_lse=True)

Conventions as in FlashAttention: GQA/MQA when heads of q are a multiple of heads of k/v;
causal masks aligned bottom-right when seqlen_q != seqlen_k; window_size=(left, right) in keys
around that diagonal (-1: unbounded); softcap > 0 applies softcap * tanh(s / softcap) to the
scaled scores; LSE is float32, (batch, heads, seqlen_q) or (heads, total_q) for varlen.
Forward only. CPU tensors (float32, float16, bfloat16) run the reference; CUDA tensors
(float16, bfloat16) run the portable flash kernel (sm_80 and newer). On CUDA, the varlen entry
point copies cu_seqlens to the host to validate them, which waits for the current stream.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._torch import current_stream


def _window(window_size) -> tuple[int, int]:
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2):
        raise ValueError(f"window_size must be a pair (left, right), got {window_size!r}")
    return int(window_size[0]), int(window_size[1])


@torch.library.custom_op("tilegrid::flash_attn_forward", mutates_args=())
def flash_attn_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
    window_left: int, window_right: int, softcap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    _C.flash_attn_forward(
        q, k, v, softmax_scale, causal, window_left, window_right, softcap, out, lse,
        current_stream(q),
    )
    return out, lse


@flash_attn_forward.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap):
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)


@torch.library.custom_op("tilegrid::flash_attn_varlen_forward", mutates_args=())
def flash_attn_varlen_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
    causal: bool, window_left: int, window_right: int, softcap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=q.device)
    _C.flash_attn_varlen_forward(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
        window_left, window_right, softcap, out, lse, current_stream(q),
    )
    return out, lse


@flash_attn_varlen_forward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, softcap):
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty(q.shape[1], q.shape[0], dtype=torch.float32)


def flash_attn_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float] = None,
    causal: bool = False, window_size=(-1, -1), softcap: float = 0.0, return_lse: bool = False,
):
    """Attention over (batch, seqlen, heads, headdim) tensors; returns out, or (out, lse)."""
    left, right = _window(window_size)
    out, lse = flash_attn_forward(
        q, k, v, float(softmax_scale or 0.0), bool(causal), left, right, float(softcap)
    )
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: Optional[float] = None, causal: bool = False, window_size=(-1, -1),
    softcap: float = 0.0, return_lse: bool = False,
):
    """Attention over packed (total_tokens, heads, headdim) tensors with int32 cumulative
    sequence offsets; returns out, or (out, lse)."""
    left, right = _window(window_size)
    out, lse = flash_attn_varlen_forward(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
        float(softmax_scale or 0.0), bool(causal), left, right, float(softcap),
    )
    return (out, lse) if return_lse else out
