"""tg.distributed's ring attention against single-process attention over the whole sequence:
processes on the CPU joined by the gloo backend (2, 3 and 4 ranks), contiguous and zig-zag
shards, causal and not, GQA, a softcap, a head dim the kernels pad, packed (varlen) sequences of unequal
lengths; outputs and the gradients of q, k and v. On a GPU, the same with one rank over NCCL. Bad calls are refused."""

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
        softcap = 5.0 if heads == kv_heads == 2 else 0.0  # one case with a softcap (per block, exact)
        want = tg.flash_attn_func(*whole, causal=causal, softcap=softcap)
        want.backward(dout)
        mine = [_shard(t, rank, world, zigzag).detach().clone().requires_grad_() for t in (q, k, v)]
        fn = tg.distributed.zigzag_ring_flash_attn_func if zigzag else tg.distributed.ring_flash_attn_func
        got = fn(*mine, causal=causal, softcap=softcap)
        got.backward(_shard(dout, rank, world, zigzag))
        tol = dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
        what = (f"rank {rank}/{world}, zigzag={zigzag}, causal={causal}, heads {heads}/{kv_heads}, d {head_dim}, "
                f"{dtype}, softcap {softcap}")
        torch.testing.assert_close(got, _shard(want, rank, world, zigzag), **tol, msg=f"out: {what}")
        for name, a, b in zip("qkv", mine, whole):
            torch.testing.assert_close(a.grad, _shard(b.grad, rank, world, zigzag), **tol,
                                       msg=f"d{name}: {what}")
        if zigzag:
            full = tg.distributed.zigzag_unshard(got.detach())
            torch.testing.assert_close(full, want.detach(), **tol, msg=f"unshard: {what}")


def _shard_varlen(x, lengths, rank, world, zigzag):
    """This rank's pieces of every packed sequence of x (tokens along dim 0), packed."""
    parts, start = [], 0
    for n in lengths:
        seq = x[start:start + n]
        start += n
        if zigzag:
            chunks = seq.chunk(2 * world)
            parts += [chunks[rank], chunks[2 * world - 1 - rank]]
        else:
            parts.append(seq.chunk(world)[rank])
    return torch.cat(parts)


def _check_varlen(rank, world, device, dtype):
    lengths = [4 * world, 12 * world, 2 * world, 8 * world]  # multiples of 2 W, unequal
    for zigzag, causal, heads, kv_heads, head_dim in [(True, True, 4, 2, 64), (False, True, 2, 2, 32),
                                                       (False, False, 4, 1, 64), (True, False, 2, 2, 64)]:
        g = torch.Generator().manual_seed(23)
        T = sum(lengths)
        q = torch.randn(T, heads, head_dim, generator=g).to(device, dtype)
        k = torch.randn(T, kv_heads, head_dim, generator=g).to(device, dtype)
        v = torch.randn(T, kv_heads, head_dim, generator=g).to(device, dtype)
        dout = torch.randn(T, heads, head_dim, generator=g).to(device, dtype)
        cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)
        whole = [t.clone().requires_grad_() for t in (q, k, v)]
        want = tg.flash_attn_varlen_func(*whole, cu, cu, max(lengths), max(lengths), causal=causal)
        want.backward(dout)
        local = [n // world for n in lengths]
        cu_local = torch.tensor([0] + torch.tensor(local).cumsum(0).tolist(), dtype=torch.int32, device=device)
        mine = [_shard_varlen(t, lengths, rank, world, zigzag).detach().clone().requires_grad_() for t in (q, k, v)]
        fn = (tg.distributed.zigzag_ring_flash_attn_varlen_func if zigzag
              else tg.distributed.ring_flash_attn_varlen_func)
        got = fn(*mine, cu_local, max(local), causal=causal)
        got.backward(_shard_varlen(dout, lengths, rank, world, zigzag))
        tol = dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
        what = f"varlen rank {rank}/{world}, zigzag={zigzag}, causal={causal}, heads {heads}/{kv_heads}, {dtype}"
        torch.testing.assert_close(got, _shard_varlen(want, lengths, rank, world, zigzag), **tol, msg=f"out: {what}")
        for name, a, b in zip("qkv", mine, whole):
            torch.testing.assert_close(a.grad, _shard_varlen(b.grad, lengths, rank, world, zigzag), **tol,
                                       msg=f"d{name}: {what}")


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
        _check_varlen(rank, world, device, torch.bfloat16 if device == "cuda" else torch.float32)
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


@pytest.mark.parametrize("name", ["ring_flash_attn_varlen_func", "zigzag_ring_flash_attn_varlen_func"])
def test_offsets_that_are_not_tensors_are_refused_naming_them(name):
    packed = torch.randn(6, 2, 16)
    with pytest.raises(TypeError, match=rf"{name}: cu_seqlens must be an int32 torch.Tensor .* got list"):
        getattr(tg.distributed, name)(packed, packed, packed, [0, 6], 6)


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
        packed = torch.randn(6, 2, 16)
        with pytest.raises(TypeError, match="cu_seqlens must be an int32 torch.Tensor .* got torch.int64"):
            tg.distributed.ring_flash_attn_varlen_func(packed, packed, packed, torch.tensor([0, 6]), 6)
        with pytest.raises(ValueError, match="cu_seqlens must be the local shard's int32 offsets"):
            tg.distributed.ring_flash_attn_varlen_func(packed, packed, packed,
                                                       torch.tensor([0, 5], dtype=torch.int32), 6)
        with pytest.raises(ValueError, match="its length must be even"):
            tg.distributed.zigzag_ring_flash_attn_varlen_func(
                packed, packed, packed, torch.tensor([0, 3, 6], dtype=torch.int32), 3, causal=True)
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
