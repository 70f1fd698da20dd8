"""bench/bench_decode.py's problems on the CPU (its timing needs a GPU): the paged and the
contiguous cache hold the same attention, and the bytes counted are the cache's."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import bench_decode as bench  # noqa: E402


def test_paged_problem_is_a_permutation_of_whole_pages():
    q, (k, v, table), seqlens = bench.make_problem(2, 40, 1, 16, device="cpu", dtype=torch.float32)
    assert q.shape == (2, 1, bench.HEADS_Q, bench.HEAD_DIM)
    assert k.shape == (2 * 3, 16, bench.HEADS_KV, bench.HEAD_DIM) and table.shape == (2, 3)
    assert sorted(table.flatten().tolist()) == list(range(6)) and seqlens.tolist() == [40, 40]


def test_tilegrid_decode_on_a_paged_cache_equals_the_contiguous_one():
    q, (k, v, table), seqlens = bench.make_problem(2, 40, 4, 16, device="cpu", dtype=torch.float32)
    cells = torch.arange(40)
    k_flat = torch.stack([k[table[b, cells // 16].long(), cells % 16] for b in range(2)])
    v_flat = torch.stack([v[table[b, cells // 16].long(), cells % 16] for b in range(2)])
    paged = bench.tilegrid_decode(q, (k, v, table), seqlens)
    contiguous = bench.tilegrid_decode(q, (k_flat, v_flat, None), seqlens)
    torch.testing.assert_close(paged, contiguous)


def test_bytes_are_the_caches_keys_and_values():
    assert bench.kv_bytes(1, 1024) == 1024 * 8 * 128 * 2 * 2
