"""tilegrid's attention as a Hugging Face transformers attention implementation.

transformers calls an attention implementation as
``fn(module, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs)`` with
query [batch, heads, q_len, head_dim] and key/value [batch, kv_heads, kv_len, head_dim] (after
the KV cache's update), and expects (output [batch, q_len, heads, head_dim], weights or None).
The mask it passes is the one of the mask function registered under the same name: here
transformers' own flash-attention mask, a [batch, kv_len] padding mask, or None when there is
no padding. The three input layouts of its flash-attention path are all handled, as
FlashAttention's integration handles them:

- padded batches (a padding mask): the valid tokens are gathered and run through
  tg.flash_attn_varlen_func, and the output scattered back, zeros at padded queries;
- packed sequences (several documents in one row, ``position_ids`` restarting at each
  document, or ``cu_seq_lens_q``/``cu_seq_lens_k`` from transformers'
  DataCollatorWithFlattening): tg.flash_attn_varlen_func over the documents;
- otherwise tg.flash_attn_func, causal aligned to the bottom-right corner (a query i of q_len
  sees keys up to i + kv_len - q_len: decoding with a cache).

Keys from tilegrid's PagedKVCache (paged_cache.py) are this step's only: they go to the cache's
layer, which appends them to its pages and attends through tg.flash_attn_with_kvcache.

Sliding windows (``sliding_window``, in transformers' convention of a total window length),
``softcap``, grouped-query attention and head dims up to 256 are passed to the kernels.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...flash_attn import flash_attn_func, flash_attn_varlen_func
from .paged_cache import paged_layer_of

NAME = "tilegrid"


def _unpadding(mask: torch.Tensor):
    """Row indices of the valid tokens of a [batch, len] padding mask, their cumulative
    lengths (int32, batch + 1) and the longest length."""
    lengths = mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu, int(lengths.max().item()) if lengths.numel() else 0


def _packed_offsets(position_ids: Optional[torch.Tensor], batch: int):
    """Document offsets (int32) and the longest document when position_ids describe packed
    sequences (one row whose positions restart), else None: transformers' rule."""
    if position_ids is None or batch != 1 or position_ids.dim() != 2:
        return None
    pos = position_ids.reshape(-1)
    if pos.numel() < 2:
        return None
    expected = torch.arange(pos.numel(), device=pos.device) + pos.min()
    if not bool((expected != pos).any()):
        return None
    starts = (pos == pos.min()).nonzero().flatten().to(torch.int32)
    cu = torch.cat([starts, torch.tensor([pos.numel()], dtype=torch.int32, device=pos.device)])
    return cu, int(cu.diff().max().item())


def _window(sliding_window: Optional[int], kv_len: int) -> tuple[int, int]:
    """transformers' window (a total length, this token included) as FlashAttention's
    (left, right), as its flash-attention path converts it."""
    if sliding_window is None or kv_len <= sliding_window:
        return (-1, -1)
    return (sliding_window - 1, sliding_window - 1)


def tilegrid_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    is_causal: Optional[bool] = None,
    s_aux: Optional[torch.Tensor] = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-interface call on tilegrid's kernels (see the module's text).

    Returns (output [batch, q_len, heads, head_dim], None): attention weights are never formed.

    Raises:
        NotImplementedError: dropout > 0 (tilegrid's attention has no dropout), attention
            sinks (``s_aux``; FlashAttention-4 has them as ``learnable_sink``), or
            ``output_attentions=True``.
        ValueError: a mask that is not a [batch, kv_len] padding mask (a 4-D mask reaches here
            only when the mask function registered for "tilegrid" was replaced).
    """
    if dropout:
        raise NotImplementedError(
            f"tilegrid attention: dropout must be 0 (tilegrid's attention has no dropout), got {dropout}; "
            "set the config's attention_dropout to 0.0 or use attn_implementation='sdpa'")
    if s_aux is not None:
        raise NotImplementedError("tilegrid attention: attention sinks (s_aux) are not implemented; "
                                  "FlashAttention-4 has them (learnable_sink)")
    if kwargs.get("output_attentions", False):
        raise NotImplementedError("tilegrid attention: output_attentions=True is not supported (the "
                                  "weights are never formed); use attn_implementation='eager'")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    paged = paged_layer_of(key)
    if paged is not None:
        if not causal:
            raise NotImplementedError("tilegrid attention: PagedKVCache serves causal (decoder) attention only")
        window = (-1, -1) if sliding_window is None else (sliding_window - 1, sliding_window - 1)
        return paged.attend(query, key, value, attention_mask, scaling, window, float(softcap or 0.0)), None
    batch, _, q_len, _ = query.shape
    kv_len = key.shape[2]
    # The kernels take [batch, seq, heads, dim].
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if q.dtype == torch.float32 and q.is_cuda:
        # Layer norms kept in float32 (PEFT does that) make float32 states: back to the
        # weights' dtype, as transformers' flash-attention path does.
        weight = next((p for p in module.parameters() if p.dtype in (torch.float16, torch.bfloat16)), None)
        if weight is not None:
            q, k, v = q.to(weight.dtype), k.to(weight.dtype), v.to(weight.dtype)
    options = dict(softmax_scale=scaling, causal=causal, window_size=_window(sliding_window, kv_len),
                   softcap=float(softcap or 0.0))

    if attention_mask is not None:
        if attention_mask.dim() != 2 or attention_mask.shape[0] != batch:
            raise ValueError(
                f"tilegrid attention: expected a [batch, kv_len] padding mask (transformers' flash-attention "
                f"mask, registered with tilegrid's attention), got shape {list(attention_mask.shape)}")
        mask = attention_mask.bool()
        if k.shape[1] > mask.shape[1]:  # a static cache longer than the mask: its unused tail
            k, v = k[:, :mask.shape[1]], v[:, :mask.shape[1]]
        kv_rows, cu_k, max_k = _unpadding(mask)
        k_rows = k.reshape(-1, *k.shape[2:])[kv_rows]
        v_rows = v.reshape(-1, *v.shape[2:])[kv_rows]
        if q_len == mask.shape[1]:
            q_rows, cu_q, max_q = kv_rows, cu_k, max_k
        else:  # a cache ahead of the queries: left padding, as transformers assumes
            q_rows, cu_q, max_q = _unpadding(mask[:, -q_len:])
        out_rows = flash_attn_varlen_func(q.reshape(-1, *q.shape[2:])[q_rows], k_rows, v_rows, cu_q, cu_k,
                                          max(max_q, 1), max(max_k, 1), **options)
        out = out_rows.new_zeros(batch * q_len, *out_rows.shape[1:])
        out[q_rows] = out_rows
        return out.view(batch, q_len, *out_rows.shape[1:]), None

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None:
        max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
        max_q = int(max_q) if max_q is not None else int(cu_q.diff().max().item())
        max_k = int(max_k) if max_k is not None else int(cu_k.diff().max().item())
        packed = (cu_q.to(torch.int32), cu_k.to(torch.int32), max_q, max_k)
    else:
        found = _packed_offsets(kwargs.get("position_ids"), batch) if q_len == kv_len else None
        packed = (found[0], found[0], found[1], found[1]) if found is not None else None
    if packed is not None:
        cu_q, cu_k, max_q, max_k = packed
        out = flash_attn_varlen_func(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]),
                                     v.reshape(-1, *v.shape[2:]), cu_q, cu_k, max_q, max_k, **options)
        return out.view(batch, q_len, *out.shape[1:]), None

    return flash_attn_func(q, k, v, **options), None


def register(name: str = NAME) -> str:
    """Registers tilegrid's attention with transformers under `name` (default "tilegrid"),
    with transformers' flash-attention mask function under the same name, so that
    ``from_pretrained(..., attn_implementation="tilegrid")`` or
    ``model.set_attn_implementation("tilegrid")`` selects it. Returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, tilegrid_attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name
