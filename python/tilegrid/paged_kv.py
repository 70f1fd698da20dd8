"""Keys and values of a paged KV cache, gathered into the packed varlen layout.

FlashAttention's paged form of ``flash_attn_varlen_func``: k and v are page pools
(num_blocks, page_block_size, nheads_k, headdim), ``block_table[b]`` lists sequence b's pages
in order, and ``cu_seqlens_k`` gives each sequence's number of keys, which fill its first
pages from slot 0. The attention kernels read packed rows, so the keys are gathered first:
one copy of the keys attended to (cu_seqlens_k[-1] rows of k and of v), differentiable in k
and v; a kernel that reads the pages in place is not written yet.
"""

from __future__ import annotations

import torch

from .varlen_used import ragged_rows


def gather_paged_kv(op: str, k: torch.Tensor, v: torch.Tensor, block_table, cu_seqlens_k: torch.Tensor):
    """(k rows, v rows) of every sequence's keys, packed as cu_seqlens_k says.

    Checks, before anything is read: cu_seqlens_k (int32 offsets from 0, non-decreasing, on
    k's device), the pools' shapes, block_table's type, shape, device and entries (inside the
    pool), and that each sequence's keys fit the pages its row lists.
    """
    if not isinstance(cu_seqlens_k, torch.Tensor) or cu_seqlens_k.dim() != 1 or cu_seqlens_k.numel() == 0 \
            or cu_seqlens_k.dtype != torch.int32:
        got = (f"{cu_seqlens_k.dtype} of shape {list(cu_seqlens_k.shape)}" if isinstance(cu_seqlens_k, torch.Tensor)
               else type(cu_seqlens_k).__name__)
        raise TypeError(f"{op}: cu_seqlens_k must be an int32 tensor (batch + 1,), got {got}")
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 \
            or block_table.dtype not in (torch.int32, torch.int64):
        got = (f"{block_table.dtype} of shape {list(block_table.shape)}" if isinstance(block_table, torch.Tensor)
               else type(block_table).__name__)
        raise TypeError(f"{op}: block_table must be an int32 tensor (batch, max_blocks_per_seq), got {got}")
    for name, pool in (("k", k), ("v", v)):
        if not isinstance(pool, torch.Tensor) or pool.dim() != 4:
            got = list(pool.shape) if isinstance(pool, torch.Tensor) else type(pool).__name__
            raise ValueError(f"{op}: with block_table, {name} must be a page pool (num_blocks, "
                             f"page_block_size, nheads_k, headdim), got {got}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"{op}: k and v must be pools of one (num_blocks, page_block_size, nheads_k), "
                         f"got {list(k.shape)} and {list(v.shape)}")
    if block_table.device != k.device:
        raise ValueError(f"{op}: block_table must be on k's device {k.device}, got {block_table.device}")
    if cu_seqlens_k.device != k.device:
        raise ValueError(f"{op}: cu_seqlens_k must be on k's device {k.device}, got {cu_seqlens_k.device}")
    offsets = cu_seqlens_k.cpu()
    if int(offsets[0]) != 0 or bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError(f"{op}: cu_seqlens_k must start at 0 and not decrease, got {offsets.tolist()}")
    batch = cu_seqlens_k.numel() - 1
    if block_table.shape[0] != batch:
        raise ValueError(f"{op}: block_table must have a row a sequence ({batch}), got {block_table.shape[0]} rows")
    num_blocks, page = k.shape[0], k.shape[1]
    if page < 1:
        raise ValueError(f"{op}: the page pools' page_block_size must be at least 1, got {list(k.shape)}")
    lengths = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int64)
    lengths_h = (offsets[1:] - offsets[:-1]).to(torch.int64)
    pages_needed = (lengths_h + page - 1) // page
    if batch and int(pages_needed.max()) > block_table.shape[1]:
        b = int(pages_needed.argmax())
        raise ValueError(f"{op}: sequence {b} has {int(lengths_h[b])} keys, {int(pages_needed[b])} pages of "
                         f"{page}, but block_table has {block_table.shape[1]} a row")
    used = torch.arange(block_table.shape[1], device="cpu") < pages_needed[:, None]
    table_h = block_table.cpu().to(torch.int64)
    bad = used & ((table_h < 0) | (table_h >= num_blocks))
    if bool(bad.any()):
        b, j = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{op}: block_table[{b}, {j}] = {int(table_h[b, j])} is outside the pool "
                         f"[0, {num_blocks})")
    total = int(lengths_h.sum())
    seq, position, _ = ragged_rows(lengths, total)
    block = block_table.to(torch.int64)[seq, position // page]
    slot = position % page
    return k[block, slot], v[block, slot]
