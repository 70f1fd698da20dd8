"""tg.flash_attn_with_kvcache: attention of new queries over a KV cache, with FlashAttention's
signature and semantics (its ``flash_attn_with_kvcache``): new keys and values appended to the
cache in place, rotary embeddings applied to q and the new k, contiguous or paged caches.

Every argument is checked before anything is written (a bad block table, lengths past the cache
or a wrong shape raise and leave the cache as it was); the new k and v are written into the
cache by tensor indexing. Attention then reads the cache where it lies
(tilegrid.attention.forward_kvcache in C++: on CUDA a kernel that packs each KV head's query
heads into one tile and splits long caches across CTAs, cuda/flash_decode_kernel.cuh; on the
CPU the reference). What that path does not take runs as before, each sequence's keys gathered
into one packed buffer for tg.flash_attn_varlen_func: inputs that need gradients, float8
inputs, on CUDA head dims other than 64, 128 and 256, a softmax_scale <= 0 without softcap, and
caches whose rows are not 16-byte aligned (q is copied into an aligned layout where it is not).
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from . import _C
from ._torch import current_stream
from .attention_fp8 import check_descales, check_fp8, dequantise_varlen
from .attention_sinks import apply_learnable_sink, check_learnable_sink
from .flash_attn import _kernel_ready, _real, _window, check_pack_gqa, flash_attn_varlen_func
from .split_kv import attention_in_parts
from .varlen_used import ragged_rows

_OP = "flash_attn_with_kvcache"

# Whether attention reads the cache in place where it can (see the module's docstring); the
# gather path is kept for what the in-place path does not take, and for comparison in tests
# and benchmarks, which set this to False.
IN_PLACE = True


def _rows_aligned(t: torch.Tensor) -> bool:
    """16-byte aligned data and strides (but the last, and those of extent-1 dimensions) in
    multiples of 8 elements: the CUDA kernel's 16-byte row loads (a cache, which is written in
    place, cannot be copied into that layout as q can, flash_attn._kernel_ready)."""
    return (t.data_ptr() % 16 == 0 and t.stride(-1) == 1
            and all(s % 8 == 0 or n == 1 for s, n in zip(t.stride()[:-1], t.shape[:-1])))


def _in_place_runs(q, k_cache, v_cache, scale, softcap, fp8, wants_grad: bool) -> bool:
    """Whether forward_kvcache takes this call (the module's docstring lists what it does not);
    wants_grad: a gradient is asked of q, the caches or the sink (decided outside the append's
    no_grad block)."""
    if not IN_PLACE or fp8 or wants_grad:
        return False
    if not q.is_cuda:
        return k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    d = q.shape[-1]
    # The kernel scales in float32: a scale that rounds to 0 there is not > 0.
    positive = softcap > 0 or scale is None or torch.tensor(scale, dtype=torch.float32, device="cpu").item() > 0
    return (d in (64, 128, 256) and q.dtype in (torch.float16, torch.bfloat16) and positive
            and _rows_aligned(k_cache) and _rows_aligned(v_cache))


def _int32_vector(name: str, t, batch: int, device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_OP}: {name} must be an int32 tensor of shape [{batch}] (one entry a sequence), "
                        f"got {type(t).__name__}")
    if t.dtype not in (torch.int32, torch.int64) or t.shape != (batch,):
        raise ValueError(f"{_OP}: {name} must be int32 of shape [{batch}] (one entry a sequence), got "
                         f"{t.dtype} of shape {list(t.shape)}")
    if t.device != device:
        raise ValueError(f"{_OP}: {name} must be on q's device {device}, got {t.device}")
    return t.to(torch.int64)


def _apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """x [b, s, h, d] rotated on its first 2 * cos.shape[-1] dims by cos/sin [b, s, rot/2]:
    pairs (2j, 2j + 1) when interleaved (GPT-J), (j, j + rot/2) otherwise (GPT-NeoX), in float32."""
    rot = 2 * cos.shape[-1]
    xf = x.float()
    head, tail = xf[..., :rot], xf[..., rot:]
    c, s = cos[:, :, None, :].float(), sin[:, :, None, :].float()
    if interleaved:
        a, b = head[..., 0::2], head[..., 1::2]
        rotated = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    else:
        a, b = head[..., :rot // 2], head[..., rot // 2:]
        rotated = torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    return torch.cat([rotated, tail], dim=-1).to(x.dtype)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """float8 tensors as their bytes for indexing (not every torch version's CUDA indexing
    kernels take float8); other tensors as they are."""
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _attend_in_place(q, k_cache, v_cache, seqlen_k, leftpad, cache_batch_idx, block_table, scale, causal,
                     window, softcap, num_splits, learnable_sink, return_lse, longest):
    """Attention over the cache where it lies (tilegrid.attention.forward_kvcache), the cells of
    sequence b being [leftpad[b], seqlen_k[b]), already checked on the host (so on CUDA the C++
    side neither copies nor checks them again); longest: the keys of the longest sequence."""
    q = _kernel_ready(q)
    batch, seqlen_q, nheads, d = q.shape
    if num_splits == 0 and q.is_cuda:
        num_splits = _C.decode_num_splits(batch, k_cache.shape[2], seqlen_q * (nheads // k_cache.shape[2]),
                                          longest, d, q.device.index)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, nheads, seqlen_q, dtype=torch.float32, device=q.device)
    _C.flash_attn_kvcache_forward(q, k_cache, v_cache, seqlen_k, leftpad, cache_batch_idx, block_table, scale,
                                  causal, window[0], window[1], float(softcap), num_splits, out, lse,
                                  check_values=False, stream=current_stream(q))
    if learnable_sink is not None:
        out, lse = apply_learnable_sink(out, lse, learnable_sink, varlen=False)
    return (out, lse) if return_lse else out


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: Optional[torch.Tensor] = None,
    v: Optional[torch.Tensor] = None,
    rotary_cos: Optional[torch.Tensor] = None,
    rotary_sin: Optional[torch.Tensor] = None,
    cache_seqlens: Optional[Union[int, torch.Tensor]] = None,
    cache_batch_idx: Optional[torch.Tensor] = None,
    cache_leftpad: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size=(-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: Optional[torch.Tensor] = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
    *,
    learnable_sink: Optional[torch.Tensor] = None,
    pack_gqa: Optional[bool] = None,
    q_descale: Optional[torch.Tensor] = None,
    k_descale: Optional[torch.Tensor] = None,
    v_descale: Optional[torch.Tensor] = None,
):
    """Attention of q over a KV cache, after appending k and v to it in place.

    FlashAttention 2's ``flash_attn_with_kvcache``: the same arguments in the same order.

    Args:
        q: Queries (batch, seqlen_q, nheads, headdim): float16 or bfloat16 on a CUDA GPU,
            float32, float16 or bfloat16 on the CPU.
        k_cache: The key cache: (batch_cache, seqlen_cache, nheads_k, headdim), or with
            block_table the page pool (num_blocks, page_block_size, nheads_k, headdim). q's
            dtype and device; nheads a multiple of nheads_k.
        v_cache: The value cache, k_cache's shape.
        k: New keys (batch, seqlen_new, nheads_k, headdim) to append at each sequence's
            cache_seqlens, or None. Given with v or not at all.
        v: New values, k's shape.
        rotary_cos: (seqlen_ro, rotary_dim / 2), rotary_dim <= headdim and even; with
            rotary_sin, RoPE is applied to the new k at positions cache_seqlens + i, and to q
            at the same positions when causal or windowed, else at cache_seqlens for every
            query (FlashAttention's rule). Needs k and v.
        rotary_sin: Same shape as rotary_cos.
        cache_seqlens: The cache's current length for each sequence, before the append: an
            int for all, or int32 (batch,). None: the whole cache (seqlen_cache, or the
            pages of block_table) holds valid keys.
        cache_batch_idx: int32 (batch,): which row of the cache each sequence uses; None:
            row b for sequence b. Not with block_table.
        cache_leftpad: int32 (batch,): where each sequence's keys start in its cache row
            (the cells before are padding); None: 0. Not with block_table.
        block_table: int32 (batch, max_blocks_per_seq): the pages of each sequence in
            order, indices into the pool's first dimension. None: a contiguous cache.
        softmax_scale: As in flash_attn_func; None: 1 / sqrt(headdim).
        causal: A causal mask aligned to the bottom-right corner: query i sees keys up to
            i + seqlen_k - seqlen_q, seqlen_k being the keys after the append.
        window_size: (left, right) sliding window, as in flash_attn_func.
        softcap: As in flash_attn_func; 0.0: off.
        rotary_interleaved: True: rotate dims (2j, 2j + 1) (GPT-J); False: dims (j,
            j + rotary_dim / 2) (GPT-NeoX, Llama).
        alibi_slopes: Must be None (no ALiBi; a tensor raises NotImplementedError).
        num_splits: How many parts to split each sequence's key tiles into (split-KV, at
            most 256): each part runs in its own CTAs and the parts merge by their row
            maxima and sums. 0: chosen from the SM count and the work (decode_num_splits in
            tilegrid/attention/kvcache.h, not yet tuned by measurement). On the CPU the keys
            are not split. On the gather path (see the module's docstring) the parts run as
            sequences of their own (tilegrid/split_kv.py), a sliding window unsplit, and 0
            does not split.
        return_softmax_lse: Return (out, softmax_lse) instead of out.
        learnable_sink: Keyword only: None, or a floating (nheads,) tensor, one softmax-
            denominator logit a query head (FlashAttention 4's keyword; see flash_attn_func).
        pack_gqa: FlashAttention 3's keyword (keyword only): None, True or False; checked,
            and changes nothing here (see flash_attn_func).
        q_descale: FlashAttention 3's keyword (keyword only), for q, the caches and the new k
            and v in float8_e4m3fn: None (1), or float32 (batch, nheads_k) factors that
            dequantise q, as in flash_attn_func; the output is bfloat16. Forward-only; on a GPU
            through the bfloat16 kernels (tilegrid.attention_fp8).
        k_descale: The same for the keys (the cache's and the new ones).
        v_descale: The same for the values.

    Returns:
        out (batch, seqlen_q, nheads, headdim) in q's dtype (bfloat16 for float8_e4m3fn
        inputs); with return_softmax_lse also
        softmax_lse, float32 (batch, nheads, seqlen_q).

    Raises:
        ValueError: shapes, lengths past the cache (the append included), block table entries
            outside the pool, arguments that do not go together. Raised before the cache is
            written.
        TypeError: dtypes or argument types that do not fit.
        NotImplementedError: alibi_slopes given; float8_e4m3fn inputs on CUDA.
    """
    if alibi_slopes is not None:
        raise NotImplementedError(f"{_OP}: ALiBi is not implemented: alibi_slopes must be None")
    check_pack_gqa(_OP, pack_gqa)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_OP}: {name} must be a 4-D torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{_OP}: {name} must be a 4-D tensor, got {list(t.shape)}")
    check_learnable_sink(_OP, learnable_sink, q.shape[2], q.device)  # before the cache is written
    if k_cache.shape != v_cache.shape or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"{_OP}: k_cache and v_cache must have one shape and q's dtype {q.dtype}, got "
                         f"{list(k_cache.shape)} {k_cache.dtype} and {list(v_cache.shape)} {v_cache.dtype}")
    if k_cache.device != q.device or v_cache.device != q.device:
        raise ValueError(f"{_OP}: the caches must be on q's device {q.device}")
    batch, seqlen_q, nheads, d = q.shape
    _, page, nheads_k, d_k = k_cache.shape
    if d_k != d:
        raise ValueError(f"{_OP}: the caches' head dim must be q's ({d}), got {d_k}")
    if nheads_k == 0 or nheads % nheads_k:
        raise ValueError(f"{_OP}: q's heads ({nheads}) must be a multiple of the caches' ({nheads_k})")
    descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    fp8 = check_fp8(_OP, q, k_cache, v_cache, descales)
    if fp8:
        check_descales(_OP, descales, batch, nheads_k, q.device)
    left, right = _window(_OP, window_size)
    if not isinstance(num_splits, int) or isinstance(num_splits, bool) or not 0 <= num_splits <= 256:
        raise ValueError(f"{_OP}: num_splits must be an int in [0, 256], got {num_splits!r}")
    if (k is None) != (v is None):
        raise ValueError(f"{_OP}: k and v are given together or not at all")
    seqlen_new = 0
    if k is not None:
        want = (batch, k.shape[1] if k.dim() == 4 else -1, nheads_k, d)
        if k.dim() != 4 or tuple(k.shape) != want or v.shape != k.shape:
            raise ValueError(f"{_OP}: k and v must be [batch {batch}, seqlen_new, nheads_k {nheads_k}, headdim {d}], "
                             f"got {list(k.shape)} and {list(v.shape)}")
        if k.dtype != q.dtype or v.dtype != q.dtype or k.device != q.device or v.device != q.device:
            raise ValueError(f"{_OP}: k and v must have q's dtype and device")
        seqlen_new = k.shape[1]

    # Where each sequence's keys live: cache row and capacity, or pages.
    if block_table is not None:
        if cache_batch_idx is not None or cache_leftpad is not None:
            raise ValueError(f"{_OP}: cache_batch_idx and cache_leftpad do not go with block_table "
                             "(as in FlashAttention)")
        if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != batch \
                or block_table.dtype not in (torch.int32, torch.int64):
            got = (f"{block_table.dtype} of shape {list(block_table.shape)}" if isinstance(block_table, torch.Tensor)
                   else type(block_table).__name__)
            raise ValueError(f"{_OP}: block_table must be int32 [batch {batch}, max_blocks_per_seq], got {got}")
        if block_table.device != q.device:
            raise ValueError(f"{_OP}: block_table must be on q's device {q.device}, got {block_table.device}")
        pool = k_cache.shape[0]
        pages = block_table.to(torch.int64)
        capacity = pages.shape[1] * page
        rows = None
        leftpad = torch.zeros(batch, dtype=torch.int64, device=q.device)
    else:
        rows = (torch.arange(batch, device=q.device) if cache_batch_idx is None
                else _int32_vector("cache_batch_idx", cache_batch_idx, batch, q.device))
        capacity = page
        leftpad = (torch.zeros(batch, dtype=torch.int64, device=q.device) if cache_leftpad is None
                   else _int32_vector("cache_leftpad", cache_leftpad, batch, q.device))
    if cache_seqlens is None:
        lengths = torch.full((batch,), capacity - seqlen_new, dtype=torch.int64, device=q.device)
    elif isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        lengths = torch.full((batch,), cache_seqlens, dtype=torch.int64, device=q.device)
    else:
        lengths = _int32_vector("cache_seqlens", cache_seqlens, batch, q.device)

    # Every check on values, before anything is written: one host copy of the small vectors
    # (a decoding step waits for it once), checked with tensor ops rather than a loop over the
    # sequences.
    where = rows if rows is not None else pages.flatten()
    host = torch.cat([lengths.to(torch.int64), leftpad.to(torch.int64), where.to(torch.int64)]).cpu()
    lengths_h, leftpad_h, where_h = host[:batch], host[batch:2 * batch], host[2 * batch:]
    if (lengths_h < 0).any() or (leftpad_h < 0).any() or (leftpad_h > lengths_h).any():
        raise ValueError(f"{_OP}: need 0 <= cache_leftpad <= cache_seqlens, got cache_seqlens "
                         f"{lengths_h.tolist()} and cache_leftpad {leftpad_h.tolist()}")
    if (lengths_h + seqlen_new > capacity).any():
        raise ValueError(f"{_OP}: cache_seqlens + seqlen_new ({seqlen_new}) must be at most the cache's "
                         f"capacity {capacity}, got cache_seqlens {lengths_h.tolist()}")
    if rows is not None:
        if (where_h < 0).any() or (where_h >= k_cache.shape[0]).any():
            raise ValueError(f"{_OP}: cache_batch_idx entries must be in [0, {k_cache.shape[0]}), got "
                             f"{where_h.tolist()}")
    else:
        pages_h = where_h.view(batch, -1)
        used = (lengths_h + seqlen_new + page - 1) // page  # pages each sequence reaches
        reached = torch.arange(pages_h.shape[1], device="cpu") < used[:, None]
        bad = reached & ((pages_h < 0) | (pages_h >= pool))
        if bad.any():
            b = int(bad.any(dim=1).nonzero()[0])
            raise ValueError(f"{_OP}: block_table[{b}] holds pages outside the pool [0, {pool}): "
                             f"{pages_h[b, :int(used[b])].tolist()}")
    if rotary_cos is not None or rotary_sin is not None:
        if rotary_cos is None or rotary_sin is None or k is None:
            raise ValueError(f"{_OP}: rotary_cos and rotary_sin go together, and with k and v")
        if rotary_cos.dim() != 2 or rotary_cos.shape != rotary_sin.shape or 2 * rotary_cos.shape[1] > d:
            raise ValueError(f"{_OP}: rotary_cos and rotary_sin must be [seqlen_ro, rotary_dim / 2] with "
                             f"rotary_dim <= headdim {d}, got {list(rotary_cos.shape)} and {list(rotary_sin.shape)}")
        # q is rotated at cache_seqlens + i when causal or windowed, else at cache_seqlens.
        windowed = causal or left >= 0 or right >= 0
        reach = max(seqlen_new, seqlen_q if windowed else 1)
        if (lengths_h + reach > rotary_cos.shape[0]).any():
            raise ValueError(f"{_OP}: rotary_cos has {rotary_cos.shape[0]} positions, fewer than the "
                             f"{(lengths_h + reach).tolist()} that q and the new k are rotated at")
    scale = None if softmax_scale is None else _real(_OP, "softmax_scale", softmax_scale)

    wants_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k_cache, v_cache, learnable_sink))

    def cells(seq: torch.Tensor, pos: torch.Tensor):
        """(pool index, slot) of the cache cells at positions pos of sequences seq (one shape)."""
        if rows is None:
            return pages[seq, pos // page], pos % page
        return rows.to(torch.int64)[seq], pos

    # One vectorised append and one gather for the whole batch: a Python loop over the
    # sequences would cost a few small launches each (256 sequences: over a thousand).
    with torch.no_grad():
        if rotary_cos is not None:
            pos_k = lengths[:, None] + torch.arange(seqlen_new, device=q.device)
            k = _apply_rotary(k, rotary_cos[pos_k], rotary_sin[pos_k], rotary_interleaved)
            pos_q = (lengths[:, None] + torch.arange(seqlen_q, device=q.device) if windowed
                     else lengths[:, None].expand(batch, seqlen_q))
            q = _apply_rotary(q, rotary_cos[pos_q], rotary_sin[pos_q], rotary_interleaved)
        sequences = torch.arange(batch, device=q.device)
        if seqlen_new:
            pos = lengths.to(torch.int64)[:, None] + torch.arange(seqlen_new, device=q.device)
            block, slot = cells(sequences[:, None].expand_as(pos), pos)
            _as_bytes(k_cache)[block, slot] = _as_bytes(k)
            _as_bytes(v_cache)[block, slot] = _as_bytes(v)
        if _in_place_runs(q, k_cache, v_cache, scale, softcap, fp8, wants_grad):
            return _attend_in_place(q, k_cache, v_cache, (lengths + seqlen_new).to(torch.int32),
                                    None if cache_leftpad is None else leftpad.to(torch.int32),
                                    None if cache_batch_idx is None else rows.to(torch.int32),
                                    None if block_table is None else block_table.to(torch.int32).contiguous(),
                                    scale, causal, (left, right), softcap, num_splits, learnable_sink,
                                    return_softmax_lse,
                                    int((lengths_h + seqlen_new - leftpad_h).max()) if batch else 0)
        counts_h = lengths_h.to(torch.int64) + seqlen_new - leftpad_h.to(torch.int64)
        total_k = int(counts_h.sum())
        seq, pos, cu_k_t = ragged_rows(counts_h.to(q.device), total_k)
        block, slot = cells(seq, pos + leftpad.to(torch.int64)[seq])
        keys, values = (_as_bytes(c)[block, slot].view(c.dtype) for c in (k_cache, v_cache))
    cu_q_t = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32, device=q.device)
    max_k = int(counts_h.max()) if batch else 0
    q_rows = q.reshape(batch * seqlen_q, nheads, d)
    if fp8:  # dequantised once, for split and unsplit runs alike
        q_rows, keys, values = dequantise_varlen(_OP, q_rows, keys, values, cu_q_t, cu_k_t, **descales)
    if num_splits > 1 and left < 0 and right < 0 and batch and seqlen_q:
        out, lse = attention_in_parts(q_rows, keys, values, counts_h, seqlen_q, num_splits, causal=causal,
                                      softmax_scale=scale, softcap=softcap)
        if learnable_sink is not None:
            out, lse = apply_learnable_sink(out, lse, learnable_sink, varlen=True)
    else:
        out, lse = flash_attn_varlen_func(
            q_rows, keys, values, cu_q_t, cu_k_t,
            max(seqlen_q, 1), max(max_k, 1), softmax_scale=scale, causal=causal,
            window_size=(left, right), softcap=softcap, return_lse=True, learnable_sink=learnable_sink)
    if fp8:
        out = out.to(torch.bfloat16)
    out = out.view(batch, seqlen_q, nheads, d)
    if not return_softmax_lse:
        return out
    # (nheads, total_q) -> (batch, nheads, seqlen_q)
    return out, lse.view(nheads, batch, seqlen_q).transpose(0, 1).contiguous()
