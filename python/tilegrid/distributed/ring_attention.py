"""Context-parallel (ring) attention over torch.distributed: a sequence split across the ranks
of a process group, each rank holding its queries and passing its keys and values around the
ring, with tilegrid's attention kernels (tg.flash_attn_func's forward and backward) on each
block and the partial outputs merged exactly by their log-sum-exp::

    out = tg.distributed.ring_flash_attn_func(q, k, v, causal=True, group=group)
    out = tg.distributed.zigzag_ring_flash_attn_func(q, k, v, causal=True, group=group)
    out = tg.distributed.zigzag_ring_flash_attn_varlen_func(q, k, v, cu_seqlens, max_seqlen,
                                                            causal=True, group=group)

q, k, v: this rank's shard, (batch, seqlen_local, heads, headdim) as flash_attn_func takes
them; the same seqlen_local on every rank. `ring_flash_attn_func` takes contiguous shards
(rank r holds tokens [r L, (r+1) L)); under causal masking its work is unbalanced (the last
rank attends to every block, the first to one). `zigzag_ring_flash_attn_func` takes the
zig-zag shards of `zigzag_shard` (the sequence cut into 2 W chunks; rank r holds chunks r and
2W-1-r), which gives every rank the same causal work. The varlen forms take packed sequences
(flash_attn_varlen_func's layout), every sequence split across the ranks in the same way.

Forward: W steps; at each, the key/value block received at the last step is sent on to the
next rank (torch.distributed P2P: batch_isend_irecv, running while this rank computes) and
attended to, with causal masking only on the rank's own block (the others lie wholly before or
after its queries). Backward: the same ring again, each block's dK and dV accumulated in
float32 as they travel with it and handed back to the owner at the end; dQ stays local. The
backward of every block uses the merged output and log-sum-exp, so that its probabilities are
the whole row's. dropout, ALiBi and sliding windows are refused (not implemented).

Keep NCCL's NVLink multicast off where this runs on NVLink machines (NCCL_NVLS_ENABLE=0; the
tests, bench/bench_distributed.py and examples/train_llama.py set it).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .. import flash_attn as _fa


class _Ring:
    """The ring of a process group: send to the next rank, receive from the previous one."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        whole = group if group is not None else dist.group.WORLD
        self.next = dist.get_global_rank(whole, (self.rank + 1) % self.world)
        self.prev = dist.get_global_rank(whole, (self.rank - 1) % self.world)

    def pass_on(self, t: torch.Tensor):
        """Starts sending t to the next rank and receiving the previous rank's tensor of the
        same shape; returns (the receive buffer, the requests to wait on)."""
        buf = torch.empty_like(t)
        ops = [dist.P2POp(dist.isend, t, self.next, self.group), dist.P2POp(dist.irecv, buf, self.prev, self.group)]
        return buf, dist.batch_isend_irecv(ops)


def _wait(reqs) -> None:
    for r in reqs:
        r.wait()


def _ring_forward(ring: _Ring, kv: torch.Tensor, attend) -> None:
    """attend(step, kv) for each block of the ring in turn, the next block on its way in while
    this one is attended to (kv: this rank's [2, ...] keys and values)."""
    for step in range(ring.world):
        nxt, reqs = ring.pass_on(kv) if step + 1 < ring.world else (None, [])
        attend(step, kv)
        _wait(reqs)
        kv = nxt


def _ring_backward(ring: _Ring, kv: torch.Tensor, gradients) -> torch.Tensor:
    """The ring again for the backward: gradients(step, kv, mine) adds the local dQ and writes
    this rank's share of the held block's dK/dV (float32) into `mine` ([2, ...] zeros). The
    held block's gradients travel on with it, each rank adding its share, the hand-over
    running while the next block is computed; after the last step each rank holds its own
    block's. Returns them."""
    held, dkv = None, None  # held: (receive buffer, requests) of the gradients so far
    for step in range(ring.world):
        nxt, reqs = ring.pass_on(kv) if step + 1 < ring.world else (None, [])
        mine = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        gradients(step, kv, mine)
        if held is not None:
            _wait(held[1])
            mine += held[0]
        if ring.world > 1:
            held = ring.pass_on(mine)
        else:
            dkv = mine
        _wait(reqs)
        kv = nxt
    if held is not None:
        _wait(held[1])
        dkv = held[0]
    return dkv


def _blocks(step: int, rank: int, world: int, seqlen: int, causal: bool, zigzag: bool):
    """What rank attends to at `step` (the block of rank (rank - step) mod world): (query
    slice, key/value slice, causal mask), or None where the block is wholly masked."""
    src = (rank - step) % world
    everything = slice(0, seqlen)
    if not causal:
        return everything, everything, False
    if step == 0:
        return everything, everything, True
    if not zigzag:
        return (everything, everything, False) if src < rank else None
    half = seqlen // 2
    if src < rank:  # its first chunk (src) lies before both of ours, its second after both
        return everything, slice(0, half), False
    return slice(half, seqlen), everything, False  # both its chunks lie before our second


def _merge(out: torch.Tensor, lse: torch.Tensor, part: torch.Tensor, part_lse: torch.Tensor, rows: slice):
    """out/lse (float32, [B, S, H, D] / [B, H, S]) merged in place with a block's result over
    `rows`: lse' = log(e^lse + e^part_lse), out' = out e^(lse - lse') + part e^(part_lse - lse')."""
    cur = lse[:, :, rows]
    new = torch.logaddexp(cur, part_lse)
    new_safe = torch.where(torch.isfinite(new), new, torch.zeros_like(new))  # rows nothing reached
    a = torch.exp(cur - new_safe).transpose(1, 2)[..., None]
    b = torch.exp(part_lse - new_safe).transpose(1, 2)[..., None]
    out[:, rows] = out[:, rows] * a + part.float() * b
    lse[:, :, rows] = new


def _check(name: str, q, k, v, dropout_p, window_size, alibi_slopes, group) -> None:
    _fa._check_unsupported(dropout_p, alibi_slopes)
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError(f"{name}: window_size is not supported across the ring (got {window_size})")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{name}: torch.distributed must be initialized (init_process_group)")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.shape[1] != k.shape[1] or k.shape != v.shape:
        raise ValueError(f"{name}: q, k, v must be (batch, seqlen_local, heads, headdim) with one seqlen_local, "
                         f"got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, softcap, deterministic, zigzag, group):
        ring = _Ring(group)
        B, S, H, D = q.shape
        out = torch.zeros(B, S, H, D, dtype=torch.float32, device=q.device)
        lse = torch.full((B, H, S), float("-inf"), dtype=torch.float32, device=q.device)

        def attend(step, kv):
            block = _blocks(step, ring.rank, ring.world, S, causal, zigzag)
            if block is None:
                return
            rows, cols, masked = block
            part, part_lse = _fa.flash_attn_forward(
                q[:, rows].contiguous(), kv[0][:, cols].contiguous(), kv[1][:, cols].contiguous(),
                scale, masked, -1, -1, softcap, deterministic)
            _merge(out, lse, part, part_lse, rows)

        _ring_forward(ring, torch.stack([k, v]).contiguous(), attend)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (scale, causal, softcap, deterministic, zigzag, group)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        scale, causal, softcap, deterministic, zigzag, group = ctx.args
        ring = _Ring(group)
        S = q.shape[1]
        dout = dout.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)

        def gradients(step, kv, mine):
            block = _blocks(step, ring.rank, ring.world, S, causal, zigzag)
            if block is None:
                return
            rows, cols, masked = block
            dq_b, dk_b, dv_b = _fa.flash_attn_backward(
                dout[:, rows].contiguous(), q[:, rows].contiguous(), kv[0][:, cols].contiguous(),
                kv[1][:, cols].contiguous(), out[:, rows].contiguous(), lse[:, :, rows].contiguous(), None,
                scale, masked, -1, -1, softcap, deterministic)
            dq[:, rows] += dq_b.float()
            mine[0][:, cols] = dk_b.float()
            mine[1][:, cols] = dv_b.float()

        dkv = _ring_backward(ring, torch.stack([k, v]).contiguous(), gradients)
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None, None, None, None


def _ring_call(name: str, zigzag: bool, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
               alibi_slopes, deterministic, return_attn_probs, group):
    _check(name, q, k, v, dropout_p, window_size, alibi_slopes, group)
    if zigzag and q.shape[1] % 2:
        raise ValueError(f"{name}: a zig-zag shard holds two chunks: seqlen_local must be even, got {q.shape[1]}")
    head_dim = q.shape[-1]
    qp, kp, vp, scale, head_dim = _fa._prepare(q, k, v, softmax_scale, float(softcap), name)
    out = _RingAttention.apply(qp, kp, vp, scale, bool(causal), float(softcap), bool(deterministic), zigzag, group)
    out = out[..., :head_dim] if out.shape[-1] != head_dim else out
    if return_attn_probs:
        raise NotImplementedError(f"{name}: return_attn_probs is not supported")
    return out


def ring_flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                         softmax_scale: Optional[float] = None, causal: bool = False, window_size=(-1, -1),
                         softcap: float = 0.0, alibi_slopes=None, deterministic: bool = False,
                         return_attn_probs: bool = False, group=None) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence, held in contiguous shards
    (rank r holds tokens [r L, (r + 1) L) of a sequence of W L; the module's text).
    flash_attn_func's arguments, and the process group last. Differentiable in q, k, v.

    Args:
        q: This rank's queries, (batch, seqlen_local, nheads, headdim), as flash_attn_func
            takes them; the same seqlen_local on every rank.
        k: This rank's keys, (batch, seqlen_local, nheads_k, headdim).
        v: This rank's values, k's shape.
        dropout_p: Must be 0.0 (no dropout; other values raise NotImplementedError).
        softmax_scale: Factor applied to q k^T before the softmax. None: 1 / sqrt(headdim).
        causal: Whether to apply a causal mask over the whole sequence: each query sees the
            keys at or before its place in the whole sequence, whichever rank holds them.
        window_size: Must be (-1, -1): sliding windows are not supported across the ring
            (other values raise NotImplementedError).
        softcap: If > 0, scores are soft-capped to softcap * tanh(s / softcap); 0.0: off.
        alibi_slopes: Must be None (no ALiBi; a tensor raises NotImplementedError).
        deterministic: Passed to each block's backward, as flash_attn_func's.
        return_attn_probs: Must be False (raises NotImplementedError otherwise).
        group: The torch.distributed process group whose ranks hold the sequence; None: the
            default (world) group. torch.distributed must be initialized.

    Returns:
        out, (batch, seqlen_local, nheads, headdim) in q's dtype: this rank's queries'
        attention over every rank's keys and values.
    """
    return _ring_call("ring_flash_attn_func", False, q, k, v, dropout_p, softmax_scale, causal, window_size,
                      softcap, alibi_slopes, deterministic, return_attn_probs, group)


def zigzag_ring_flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                                softmax_scale: Optional[float] = None, causal: bool = False,
                                window_size=(-1, -1), softcap: float = 0.0, alibi_slopes=None,
                                deterministic: bool = False, return_attn_probs: bool = False,
                                group=None) -> torch.Tensor:
    """As ring_flash_attn_func, on zig-zag shards (zigzag_shard: of 2 W chunks of the
    sequence, rank r holds chunks r and 2W-1-r), which give every rank the same causal work.

    Args:
        q: This rank's zig-zag shard of the queries, (batch, seqlen_local, nheads, headdim);
            seqlen_local even, the same on every rank.
        k: This rank's zig-zag shard of the keys, (batch, seqlen_local, nheads_k, headdim).
        v: This rank's zig-zag shard of the values, k's shape.
        dropout_p: Must be 0.0 (no dropout; other values raise NotImplementedError).
        softmax_scale: Factor applied to q k^T before the softmax. None: 1 / sqrt(headdim).
        causal: Whether to apply a causal mask over the whole sequence: each query sees the
            keys at or before its place in the whole sequence, whichever rank holds them.
        window_size: Must be (-1, -1): sliding windows are not supported across the ring
            (other values raise NotImplementedError).
        softcap: If > 0, scores are soft-capped to softcap * tanh(s / softcap); 0.0: off.
        alibi_slopes: Must be None (no ALiBi; a tensor raises NotImplementedError).
        deterministic: Passed to each block's backward, as flash_attn_func's.
        return_attn_probs: Must be False (raises NotImplementedError otherwise).
        group: The torch.distributed process group whose ranks hold the sequence; None: the
            default (world) group. torch.distributed must be initialized.

    Returns:
        out, q's shape and dtype: this rank's queries' attention, in its zig-zag order
        (zigzag_unshard gathers the whole sequence).
    """
    return _ring_call("zigzag_ring_flash_attn_func", True, q, k, v, dropout_p, softmax_scale, causal,
                      window_size, softcap, alibi_slopes, deterministic, return_attn_probs, group)


# ---- varlen: packed sequences, every one split across the ranks --------------------------------


class _Tokens:
    """A selection of a rank's packed tokens for one attention call: their indices (None: all)
    and the cumulative sequence offsets (int32) and longest sequence of the selection."""

    def __init__(self, index, cu, longest):
        self.index, self.cu, self.longest = index, cu, longest

    def take(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.index is None else x.index_select(0, self.index)


def _varlen_selections(cu_local: torch.Tensor, max_local: int, zigzag: bool):
    """(all tokens, the first half of each sequence, the second half) of a rank's shard."""
    everything = _Tokens(None, cu_local, max_local)
    if not zigzag:
        return everything, None, None
    cu64 = cu_local.long()
    lengths = cu64.diff()
    if bool((lengths % 2).any()):
        raise ValueError("zigzag_ring_flash_attn_varlen_func: every local sequence holds two chunks: its length "
                         f"must be even, got lengths {lengths.tolist()}")
    half = lengths // 2
    starts = cu64[:-1]
    token = torch.arange(int(cu64[-1]), device=cu_local.device)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=cu_local.device), lengths)
    first = (token - starts[seq]) < half[seq]
    cu_half = torch.cat([cu64.new_zeros(1), torch.cumsum(half, 0)]).to(torch.int32)
    return (everything, _Tokens(token[first], cu_half, max_local // 2),
            _Tokens(token[~first], cu_half, max_local // 2))


def _varlen_blocks(step, rank, world, causal, zigzag, sel):
    everything, first, second = sel
    src = (rank - step) % world
    if not causal:
        return everything, everything, False
    if step == 0:
        return everything, everything, True
    if not zigzag:
        return (everything, everything, False) if src < rank else None
    return (everything, first, False) if src < rank else (second, everything, False)


def _rows(t: _Tokens, total: int, device) -> torch.Tensor:
    return torch.arange(total, device=device) if t.index is None else t.index


class _VarlenRingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_local, max_local, scale, causal, softcap, deterministic, zigzag, group):
        ring = _Ring(group)
        T, H, D = q.shape
        sel = _varlen_selections(cu_local, max_local, zigzag and causal)
        out = torch.zeros(T, H, D, dtype=torch.float32, device=q.device)
        lse = torch.full((H, T), float("-inf"), dtype=torch.float32, device=q.device)

        def attend(step, kv):
            block = _varlen_blocks(step, ring.rank, ring.world, causal, zigzag, sel)
            if block is None:
                return
            rq, rk, masked = block
            part, part_lse = _fa.flash_attn_varlen_forward(
                rq.take(q).contiguous(), rk.take(kv[0]).contiguous(), rk.take(kv[1]).contiguous(),
                rq.cu, rk.cu, rq.longest, rk.longest, scale, masked, -1, -1, softcap, deterministic)
            rows = _rows(rq, T, q.device)
            cur = lse[:, rows]
            new = torch.logaddexp(cur, part_lse)
            safe = torch.where(torch.isfinite(new), new, torch.zeros_like(new))
            out[rows] = (out[rows] * torch.exp(cur - safe).t()[..., None]
                         + part.float() * torch.exp(part_lse - safe).t()[..., None])
            lse[:, rows] = new

        _ring_forward(ring, torch.stack([k, v]).contiguous(), attend)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse, cu_local)
        ctx.args = (max_local, scale, causal, softcap, deterministic, zigzag, group)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, cu_local = ctx.saved_tensors
        max_local, scale, causal, softcap, deterministic, zigzag, group = ctx.args
        ring = _Ring(group)
        T = q.shape[0]
        sel = _varlen_selections(cu_local, max_local, zigzag and causal)
        dout = dout.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)

        def gradients(step, kv, mine):
            block = _varlen_blocks(step, ring.rank, ring.world, causal, zigzag, sel)
            if block is None:
                return
            rq, rk, masked = block
            rows, cols = _rows(rq, T, q.device), _rows(rk, k.shape[0], q.device)
            dq_b, dk_b, dv_b = _fa.flash_attn_varlen_backward(
                rq.take(dout).contiguous(), rq.take(q).contiguous(), rk.take(kv[0]).contiguous(),
                rk.take(kv[1]).contiguous(), rq.take(out).contiguous(), lse[:, rows].contiguous(), None,
                rq.cu, rk.cu, rq.longest, rk.longest, scale, masked, -1, -1, softcap, deterministic)
            dq.index_add_(0, rows, dq_b.float())
            mine[0].index_add_(0, cols, dk_b.float())
            mine[1].index_add_(0, cols, dv_b.float())

        dkv = _ring_backward(ring, torch.stack([k, v]).contiguous(), gradients)
        return (dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)) + (None,) * 8


def _varlen_call(name, zigzag, q, k, v, cu_seqlens, max_seqlen, dropout_p, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, deterministic, return_attn_probs, group):
    _fa._check_unsupported(dropout_p, alibi_slopes)
    cu_seqlens = _fa._offsets(name, "cu_seqlens", cu_seqlens)
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError(f"{name}: window_size is not supported across the ring (got {window_size})")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{name}: torch.distributed must be initialized (init_process_group)")
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or q.shape[0] != k.shape[0]:
        raise ValueError(f"{name}: q, k, v must be packed (total_local, heads, headdim) with one total, got "
                         f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if cu_seqlens.dtype != torch.int32:  # TypeError, as flash_attn_varlen_func's offsets
        raise TypeError(f"{name}: cu_seqlens must be an int32 torch.Tensor (the local shard's offsets), "
                        f"got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or int(cu_seqlens[-1]) != q.shape[0]:
        raise ValueError(f"{name}: cu_seqlens must be the local shard's int32 offsets ending at its {q.shape[0]} "
                         f"tokens, got {cu_seqlens.dtype} {cu_seqlens.tolist()}")
    if return_attn_probs:
        raise NotImplementedError(f"{name}: return_attn_probs is not supported")
    qp, kp, vp, scale, head_dim = _fa._prepare(q, k, v, softmax_scale, float(softcap), name)
    out = _VarlenRingAttention.apply(qp, kp, vp, cu_seqlens, int(max_seqlen), scale, bool(causal), float(softcap),
                                     bool(deterministic), zigzag, group)
    return out[..., :head_dim] if out.shape[-1] != head_dim else out


def ring_flash_attn_varlen_func(q, k, v, cu_seqlens: torch.Tensor, max_seqlen: int, dropout_p: float = 0.0,
                                softmax_scale: Optional[float] = None, causal: bool = False, window_size=(-1, -1),
                                softcap: float = 0.0, alibi_slopes=None, deterministic: bool = False,
                                return_attn_probs: bool = False, group=None) -> torch.Tensor:
    """Ring attention over packed sequences, every sequence split into W contiguous pieces
    and rank r holding piece r of each (the same lengths on every rank), in
    flash_attn_varlen_func's layout. Differentiable in q, k, v.

    Args:
        q: This rank's queries, (total_local, nheads, headdim): its piece of every sequence,
            one after another.
        k: This rank's keys, (total_local, nheads_k, headdim).
        v: This rank's values, k's shape.
        cu_seqlens: int32 (batch + 1,): where each local piece starts in q (and k, v), from 0,
            ending at total_local; the same on every rank.
        max_seqlen: The longest local piece's length.
        dropout_p: Must be 0.0 (no dropout; other values raise NotImplementedError).
        softmax_scale: Factor applied to q k^T before the softmax. None: 1 / sqrt(headdim).
        causal: Whether to apply a causal mask over the whole sequence: each query sees the
            keys at or before its place in the whole sequence, whichever rank holds them.
        window_size: Must be (-1, -1): sliding windows are not supported across the ring
            (other values raise NotImplementedError).
        softcap: If > 0, scores are soft-capped to softcap * tanh(s / softcap); 0.0: off.
        alibi_slopes: Must be None (no ALiBi; a tensor raises NotImplementedError).
        deterministic: Passed to each block's backward, as flash_attn_func's.
        return_attn_probs: Must be False (raises NotImplementedError otherwise).
        group: The torch.distributed process group whose ranks hold the sequence; None: the
            default (world) group. torch.distributed must be initialized.

    Returns:
        out, (total_local, nheads, headdim) in q's dtype.
    """
    return _varlen_call("ring_flash_attn_varlen_func", False, q, k, v, cu_seqlens, max_seqlen, dropout_p,
                        softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                        return_attn_probs, group)


def zigzag_ring_flash_attn_varlen_func(q, k, v, cu_seqlens: torch.Tensor, max_seqlen: int,
                                       dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                       causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                                       alibi_slopes=None, deterministic: bool = False,
                                       return_attn_probs: bool = False, group=None) -> torch.Tensor:
    """As ring_flash_attn_varlen_func with every sequence in zig-zag shards (2 W chunks; rank r
    holds chunks r and 2W-1-r of each, concatenated): causal work balanced.

    Args:
        q: This rank's queries, (total_local, nheads, headdim): its zig-zag shard of every
            sequence, one after another.
        k: This rank's keys, (total_local, nheads_k, headdim).
        v: This rank's values, k's shape.
        cu_seqlens: int32 (batch + 1,): where each local shard starts, from 0, ending at
            total_local; every local length even (two chunks), the same on every rank.
        max_seqlen: The longest local shard's length.
        dropout_p: Must be 0.0 (no dropout; other values raise NotImplementedError).
        softmax_scale: Factor applied to q k^T before the softmax. None: 1 / sqrt(headdim).
        causal: Whether to apply a causal mask over the whole sequence: each query sees the
            keys at or before its place in the whole sequence, whichever rank holds them.
        window_size: Must be (-1, -1): sliding windows are not supported across the ring
            (other values raise NotImplementedError).
        softcap: If > 0, scores are soft-capped to softcap * tanh(s / softcap); 0.0: off.
        alibi_slopes: Must be None (no ALiBi; a tensor raises NotImplementedError).
        deterministic: Passed to each block's backward, as flash_attn_func's.
        return_attn_probs: Must be False (raises NotImplementedError otherwise).
        group: The torch.distributed process group whose ranks hold the sequence; None: the
            default (world) group. torch.distributed must be initialized.

    Returns:
        out, (total_local, nheads, headdim) in q's dtype, in the shards' order.
    """
    return _varlen_call("zigzag_ring_flash_attn_varlen_func", True, q, k, v, cu_seqlens, max_seqlen, dropout_p,
                        softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                        return_attn_probs, group)


def zigzag_shard(x: torch.Tensor, dim: int = 1, group=None) -> torch.Tensor:
    """This rank's zig-zag shard of a whole sequence: of 2 W equal chunks along dim, chunks r
    and 2W-1-r, concatenated.

    Args:
        x: The whole sequence (every rank passes the same); its length along dim a multiple
            of 2 W.
        dim: The sequence dimension; default 1, flash_attn_func's seqlen.
        group: The process group (W ranks); None: the default (world) group.

    Returns:
        A new tensor, x's shape with 1 / W of its length along dim.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if x.shape[dim] % (2 * world):
        raise ValueError(f"zigzag_shard: the length along dim {dim} ({x.shape[dim]}) must be a multiple of "
                         f"2 x world size ({2 * world})")
    chunks = x.chunk(2 * world, dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim)


def zigzag_unshard(x: torch.Tensor, dim: int = 1, group=None) -> torch.Tensor:
    """The whole sequence from every rank's zig-zag shard (an all-gather; not
    differentiable): zigzag_shard's inverse.

    Args:
        x: This rank's zig-zag shard, the same shape on every rank.
        dim: The sequence dimension; default 1.
        group: The process group (W ranks); None: the default (world) group.

    Returns:
        The whole sequence, x's shape with W times its length along dim.
    """
    world = dist.get_world_size(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    chunks = [None] * (2 * world)
    for r, p in enumerate(parts):
        chunks[r], chunks[2 * world - 1 - r] = p.chunk(2, dim)
    return torch.cat(chunks, dim)
