"""tg.distributed's ring attention against single-process attention over the whole sequence:
processes on the CPU joined by the gloo backend (2, 3 and 4 ranks), contiguous and zig-zag
shards, causal and not, GQA, a head dim the kernels pad; outputs and the gradients of q, k and
v. On a GPU, the same with one rank over NCCL. Bad calls are refused."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tilegrid as tg
from conftest import requires_cuda

# NVLink multicast stays off wherever NCCL runs (tg.distributed's docstring says why).
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

CASES = [  # (zigzag, causal, heads, kv_heads, head_dim, dtype)
    (True, True, 4, 4, 64, torch.float32),
    (False, True, 4, 2, 64, torch.float32),
    (False, False, 2, 1, 40, torch.float32),
    (True, False, 2, 2, 64, torch.float32),
    (True, True, 4, 2, 128, torch.bfloat16),
]


def _shard(x, rank, world, zigzag):
    if zigzag:
        chunks = x.chunk(2 * world, 1)
        return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], 1)
    return x.chunk(world, 1)[rank]


def _check_cases(rank, world, device, cases, seqlen_local=24):
    for zigzag, causal, heads, kv_heads, head_dim, dtype in cases:
        g = torch.Generator().manual_seed(17)
        S = seqlen_local * world
        q = torch.randn(2, S, heads, head_dim, generator=g).to(device, dtype)
        k = torch.randn(2, S, kv_heads, head_dim, generator=g).to(device, dtype)
        v = torch.randn(2, S, kv_heads, head_dim, generator=g).to(device, dtype)
        dout = torch.randn(2, S, heads, head_dim, generator=g).to(device, dtype)
        whole = [t.clone().requires_grad_() for t in (q, k, v)]
        want = tg.flash_attn_func(*whole, causal=causal)
        want.backward(dout)
        mine = [_shard(t, rank, world, zigzag).detach().clone().requires_grad_() for t in (q, k, v)]
        fn = tg.distributed.zigzag_ring_flash_attn_func if zigzag else tg.distributed.ring_flash_attn_func
        got = fn(*mine, causal=causal)
        got.backward(_shard(dout, rank, world, zigzag))
        tol = dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
        what = f"rank {rank}/{world}, zigzag={zigzag}, causal={causal}, heads {heads}/{kv_heads}, d {head_dim}, {dtype}"
        torch.testing.assert_close(got, _shard(want, rank, world, zigzag), **tol, msg=f"out: {what}")
        for name, a, b in zip("qkv", mine, whole):
            torch.testing.assert_close(a.grad, _shard(b.grad, rank, world, zigzag), **tol,
                                       msg=f"d{name}: {what}")
        if zigzag:
            full = tg.distributed.zigzag_unshard(got.detach())
            torch.testing.assert_close(full, want.detach(), **tol, msg=f"unshard: {what}")


def _worker(rank, world, init_file, backend, device):
    os.environ.update(NCCL_ENV)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        if device == "cuda":
            torch.cuda.set_device(rank)
        if device == "cuda":  # the CUDA kernels take float16 and bfloat16 only
            cases = [c[:5] + (torch.bfloat16,) for c in CASES]
        else:
            cases = CASES[:4] if world > 2 else CASES
        _check_cases(rank, world, device, cases)
    finally:
        dist.destroy_process_group()


def _spawn(world, backend="gloo", device="cpu"):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, os.path.join(tmp, "init"), backend, device), nprocs=world, join=True)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ring_attention_matches_attention_over_the_whole_sequence(world):
    _spawn(world)


@requires_cuda
@pytest.mark.gpu
def test_gpu_ring_attention_one_rank_over_nccl():
    _spawn(1, "nccl", "cuda")


def _refusals(rank, world, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        q = torch.randn(1, 6, 2, 16)
        with pytest.raises(NotImplementedError, match="dropout"):
            tg.distributed.ring_flash_attn_func(q, q, q, 0.1)
        with pytest.raises(NotImplementedError, match="window_size"):
            tg.distributed.ring_flash_attn_func(q, q, q, window_size=(4, 0))
        with pytest.raises(ValueError, match="seqlen_local must be even"):
            tg.distributed.zigzag_ring_flash_attn_func(q[:, :5], q[:, :5], q[:, :5], causal=True)
        with pytest.raises(ValueError, match="one seqlen_local"):
            tg.distributed.ring_flash_attn_func(q, q[:, :4], q[:, :4])
        with pytest.raises(ValueError, match="multiple of 2 x world size"):
            tg.distributed.zigzag_shard(torch.randn(1, 6, 2), dim=1)
    finally:
        dist.destroy_process_group()


def test_bad_calls_are_refused():
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_refusals, args=(2, os.path.join(tmp, "init")), nprocs=2, join=True)


def test_without_a_process_group_it_says_so():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(RuntimeError, match="init_process_group"):
        tg.distributed.ring_flash_attn_func(q, q, q)
