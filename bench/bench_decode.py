"""Decoding attention over a KV cache: tilegrid's flash_attn_with_kvcache against FlashAttention 3's
(`flash_attn_interface`, built with FA3_INFERENCE=1 for paged KV and split-KV) and FlashInfer's
batch decode (`flashinfer`, one query token), with the copy ceiling measured in the same run.

    python bench/bench_decode.py --out r.json [--batches 1 8 64 256] [--caches 1024 8192 32768 131072]
        [--queries 1 4] [--pages 0 16 64 256] [--max-kv-gib 16] [--splits 8] [--gather]

32 query heads over 8 KV heads of 128, bf16, as Llama-3-8B decodes. Each problem reads the
whole cache once: bytes = batch x cache x 8 x 128 x 2 (k and v) x 2 bytes, plus q and out;
decoding is bound by those bytes, so each system's time is also given as TB/s and as a
fraction of the measured copy ceiling. `--pages 0` is the contiguous cache, other values are
paged caches with pages of that many tokens, shuffled in the pool. Problems whose cache is
larger than --max-kv-gib are left out. tilegrid runs with num_splits=0 (its default: the split
count decode_num_splits chooses) and with each --splits value, reading the cache in place
(the decode kernel); with --gather also down its gather path (each sequence's keys gathered,
then the varlen kernels). Every system's output is compared with tilegrid's. Each problem is timed on one input set, so a cache smaller than the L2 (50 MB) may
be read from it, by every system alike.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import tilegrid as tg  # noqa: E402
import tilegrid.flash_attn_kvcache as kvcache_module  # noqa: E402

HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128

fa3, FA3_ERROR = harness.optional_import("flash_attn_interface")
flashinfer, FLASHINFER_ERROR = harness.optional_import("flashinfer")


def kv_bytes(batch: int, cache: int, dtype=torch.bfloat16) -> int:
    return batch * cache * HEADS_KV * HEAD_DIM * 2 * torch.finfo(dtype).bits // 8


def make_problem(batch: int, cache: int, queries: int, page: int, device="cuda", dtype=torch.bfloat16, seed=0):
    """q (batch, queries, 32, 128); the cache as (k, v, block_table or None); cache_seqlens.
    A paged cache holds each sequence's pages at random places of a pool with no spare pages."""
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(batch, queries, HEADS_Q, HEAD_DIM, device=device, dtype=dtype, generator=g)
    seqlens = torch.full((batch,), cache, dtype=torch.int32, device=device)
    if page == 0:
        shape = (batch, cache, HEADS_KV, HEAD_DIM)
        k, v = (torch.randn(shape, device=device, dtype=dtype, generator=g) for _ in range(2))
        return q, (k, v, None), seqlens
    per_seq = -(-cache // page)
    shape = (batch * per_seq, page, HEADS_KV, HEAD_DIM)
    k, v = (torch.randn(shape, device=device, dtype=dtype, generator=g) for _ in range(2))
    order = torch.randperm(batch * per_seq, device=device, generator=g)
    table = order.view(batch, per_seq).to(torch.int32)
    return q, (k, v, table), seqlens


def tilegrid_decode(q, cache, seqlens, num_splits=0):
    k, v, table = cache
    return tg.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, block_table=table, causal=True,
                                      num_splits=num_splits)


def tilegrid_gather_decode(q, cache, seqlens):
    """flash_attn_with_kvcache down its gather path (for comparison with the in-place kernel)."""
    kvcache_module.IN_PLACE = False
    try:
        return tilegrid_decode(q, cache, seqlens)
    finally:
        kvcache_module.IN_PLACE = True


def fa3_decode(q, cache, seqlens):
    k, v, table = cache
    out = fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, page_table=table, causal=True)
    return out[0] if isinstance(out, tuple) else out


def flashinfer_decoder(q, cache, seqlens):
    """FlashInfer's paged batch decode (one query token a sequence), planned once; a contiguous
    cache is given to it as one page a sequence."""
    k, v, table = cache
    batch = q.shape[0]
    page = k.shape[1]
    if table is None:
        table = torch.arange(batch, dtype=torch.int32, device=q.device)[:, None]
    per_seq = table.shape[1]
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device=q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout="NHD")
    indptr = torch.arange(0, (batch + 1) * per_seq, per_seq, dtype=torch.int32, device=q.device)
    last = (seqlens - (per_seq - 1) * page).to(torch.int32)
    wrapper.plan(indptr, table.flatten(), last, HEADS_Q, HEADS_KV, HEAD_DIM, page, data_type=q.dtype)
    return lambda: wrapper.run(q[:, 0], (k, v))[:, None]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8, 64, 256])
    parser.add_argument("--caches", type=int, nargs="*", default=[1024, 8192, 32768, 131072])
    parser.add_argument("--queries", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--pages", type=int, nargs="*", default=[0, 16, 64, 256])
    parser.add_argument("--max-kv-gib", type=float, default=16.0)
    parser.add_argument("--splits", type=int, nargs="*", default=[8],
                        help="tilegrid is also timed with each of these num_splits (split-KV)")
    parser.add_argument("--gather", action="store_true", help="also time tilegrid's gather path")
    args = parser.parse_args()

    report = harness.Report("decode attention (flash_attn_with_kvcache)")
    report.measure_ceilings()
    report.checks["FlashAttention-3"] = "measured" if fa3 else f"not measured: {FA3_ERROR}"
    report.checks["FlashInfer"] = ("measured (one query token)" if flashinfer
                                   else f"not measured: {FLASHINFER_ERROR}")
    for page in args.pages:
        for queries in args.queries:
            for batch in args.batches:
                for cache in args.caches:
                    nbytes = kv_bytes(batch, cache)
                    if nbytes > args.max_kv_gib * 2**30:
                        continue
                    problem = f"b{batch} kv{cache} q{queries} {'contiguous' if page == 0 else f'page{page}'}"
                    q, kv, seqlens = make_problem(batch, cache, queries, page)
                    nbytes += 2 * q.numel() * q.element_size()
                    want = tilegrid_decode(q, kv, seqlens)
                    systems = [("tilegrid", lambda i: tilegrid_decode(q, kv, seqlens))]
                    systems += [(f"tilegrid num_splits={n}",
                                 (lambda n: lambda i: tilegrid_decode(q, kv, seqlens, n))(n))
                                for n in args.splits if n > 1]
                    if args.gather:
                        systems.append(("tilegrid gather path", lambda i: tilegrid_gather_decode(q, kv, seqlens)))
                    if fa3 is not None:
                        systems.append(("FlashAttention-3", lambda i: fa3_decode(q, kv, seqlens)))
                    if flashinfer is not None and queries == 1:
                        try:
                            run = flashinfer_decoder(q, kv, seqlens)
                            systems.append(("FlashInfer", lambda i: run()))
                        except Exception as e:  # a peer that does not run is recorded
                            report.checks[f"{problem} FlashInfer"] = f"failed: {type(e).__name__}: {e}"[:300]
                    for name, fn in systems[1:]:
                        try:
                            diff = (fn(0).float() - want.float()).abs().max().item()
                            report.checks[f"{problem} {name} max_abs_diff vs tilegrid"] = diff
                        except Exception as e:
                            report.checks[f"{problem} {name}"] = f"failed: {type(e).__name__}: {e}"[:300]
                    harness.run_each(report, "decode", problem, nbytes, systems, sets=1, iters=20)
                    del q, kv, want
                    torch.cuda.empty_cache()
    report.write(args.out)
    print(report.table())


if __name__ == "__main__":
    main()
