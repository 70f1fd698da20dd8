"""FP8 (float8_e4m3fn) attention with FlashAttention 3's q_descale / k_descale / v_descale: the
output against the float64 reference on the dequantised inputs, and every misuse refused
before anything runs."""

import pytest
import torch

import tilegrid as tg
from attention_reference import reference
from conftest import DEVICES

FP8 = torch.float8_e4m3fn


def fp8_inputs(shape_q, shape_kv, seed=0):
    """q, k, v in e4m3 (values of a few units, inside its +-448 range)."""
    g = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(*s, generator=g) * 3).to(FP8) for s in (shape_q, shape_kv, shape_kv))


def descales(batch, nheads_k, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.rand(batch, nheads_k, generator=g) * 0.5 + 0.25 for _ in range(3))


# bfloat16's relative rounding (2**-8) of outputs of magnitude up to a few units; the float64
# sums before it differ from the reference by ~1e-6.
ATOL, RTOL = 2e-2, 1e-2
# The log-sum-exp: float64 sums on the CPU; on a GPU the dequantised inputs are bfloat16
# (2**-9 relative rounding of each product, scores of a few units: ~1e-2).
LSE_TOL = {"cpu": dict(atol=1e-4, rtol=1e-5), "cuda": dict(atol=2e-2, rtol=1e-2)}


def on(device, *tensors):
    return tuple(t.to(device) for t in tensors)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (6, 2), (4, 1)])
def test_fp8_output_matches_float64_on_dequantised_inputs(causal, heads, device):
    h, hk = heads
    q, k, v = fp8_inputs((2, 7, h, 32), (2, 9, hk, 32))
    qd, kd, vd = descales(2, hk, seed=1)
    out, lse = tg.flash_attn_func(*on(device, q, k, v), causal=causal, return_lse=True,
                                  **dict(zip(("q_descale", "k_descale", "v_descale"), on(device, qd, kd, vd))))
    assert out.dtype == torch.bfloat16 and out.shape == (2, 7, h, 32) and out.device.type == device
    out, lse = out.cpu(), lse.cpu()
    for b in range(2):
        group = h // hk
        qf = q[b].double() * qd[b].double().repeat_interleave(group)[None, :, None]
        kf = k[b].double() * kd[b].double()[None, :, None]
        vf = v[b].double() * vd[b].double()[None, :, None]
        ref_out, ref_lse = reference(qf, kf, vf, causal=causal)
        torch.testing.assert_close(out[b].double(), ref_out, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(lse[b].double(), ref_lse, **LSE_TOL[device])


def test_fp8_without_descales_is_a_factor_of_one():
    q, k, v = fp8_inputs((1, 5, 2, 16), (1, 5, 2, 16))
    ones = torch.ones(1, 2)
    plain = tg.flash_attn_func(q, k, v)
    assert torch.equal(plain, tg.flash_attn_func(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones))
    ref, _ = reference(q[0].double(), k[0].double(), v[0].double())
    torch.testing.assert_close(plain[0].double(), ref, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_varlen_uses_each_sequences_factors(device):
    lengths_q, lengths_k = [3, 0, 5], [4, 2, 6]
    cu_q = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 6, 12], dtype=torch.int32)
    g = torch.Generator().manual_seed(2)
    q = (torch.randn(8, 4, 16, generator=g) * 2).to(FP8)
    k = (torch.randn(12, 2, 16, generator=g) * 2).to(FP8)
    v = (torch.randn(12, 2, 16, generator=g) * 2).to(FP8)
    qd, kd, vd = descales(3, 2, seed=3)
    dq, dk, dv = on(device, qd, kd, vd)
    out, lse = tg.flash_attn_varlen_func(*on(device, q, k, v, cu_q, cu_k), max(lengths_q), max(lengths_k),
                                         causal=True, q_descale=dq, k_descale=dk, v_descale=dv, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == (8, 4, 16) and out.device.type == device
    out, lse = out.cpu(), lse.cpu()
    for b in range(3):
        rq, rk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        qf = q[rq].double() * qd[b].double().repeat_interleave(2)[None, :, None]
        kf = k[rk].double() * kd[b].double()[None, :, None]
        vf = v[rk].double() * vd[b].double()[None, :, None]
        ref_out, ref_lse = reference(qf, kf, vf, causal=True)
        torch.testing.assert_close(out[rq].double(), ref_out, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(lse[:, rq].double(), ref_lse, **LSE_TOL[device])


def test_fp8_misuse_is_refused_by_name():
    q, k, v = fp8_inputs((2, 4, 4, 16), (2, 4, 2, 16))
    f = tg.flash_attn_func
    with pytest.raises(ValueError, match=r"q_descale must be \(batch, nheads_k\) = \(2, 2\), got \[2, 4\]"):
        f(q, k, v, q_descale=torch.ones(2, 4))
    with pytest.raises(TypeError, match="k_descale must be float32, got bfloat16"):
        f(q, k, v, k_descale=torch.ones(2, 2, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="v_descale must be a torch.Tensor or None, got float"):
        f(q, k, v, v_descale=0.5)
    with pytest.raises(TypeError, match="must all be float8_e4m3fn when one is, got q float8_e4m3fn and k bfloat16"):
        f(q, k.to(torch.bfloat16), v)
    bf16 = [x.to(torch.bfloat16) for x in (q, k, v)]
    with pytest.raises(ValueError, match="q_descale apply to float8_e4m3fn inputs only, got q, k, v of bfloat16"):
        f(*bf16, q_descale=torch.ones(2, 2))
    with pytest.raises(NotImplementedError, match="forward-only"):
        f(q.requires_grad_(), k, v)


def test_fp8_varlen_with_block_table_is_refused():
    q = torch.randn(4, 2, 16).to(FP8)
    pool = torch.randn(2, 4, 2, 16).to(FP8)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="block_table"):
        tg.flash_attn_varlen_func(q, pool, pool, cu, cu, 4, 4, block_table=torch.zeros(1, 1, dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("paged", [False, True])
def test_fp8_kvcache_appends_and_attends_with_each_sequences_factors(num_splits, paged, device):
    batch, h, hk, d, capacity = 2, 4, 2, 16, 12
    g = torch.Generator().manual_seed(4)
    q = (torch.randn(batch, 1, h, d, generator=g) * 2).to(FP8)
    k_new = (torch.randn(batch, 1, hk, d, generator=g) * 2).to(FP8)
    v_new = (torch.randn(batch, 1, hk, d, generator=g) * 2).to(FP8)
    cache_k = (torch.randn(batch, capacity, hk, d, generator=g) * 2).to(FP8)
    cache_v = (torch.randn(batch, capacity, hk, d, generator=g) * 2).to(FP8)
    lengths = torch.tensor([5, 9], dtype=torch.int32)
    qd, kd, vd = descales(batch, hk, seed=5)
    want_k, want_v = cache_k.clone(), cache_v.clone()
    for b in range(batch):
        want_k[b, lengths[b]], want_v[b, lengths[b]] = k_new[b, 0], v_new[b, 0]
    kw = dict(zip(("k", "v", "cache_seqlens", "q_descale", "k_descale", "v_descale"),
                  on(device, k_new, v_new, lengths, qd, kd, vd)))
    kw.update(causal=True, num_splits=num_splits, return_softmax_lse=True)
    if paged:  # pages of 4 slots, each sequence's in reverse order in the pool
        pages = capacity // 4
        table = torch.tensor([[2, 1, 0], [5, 4, 3]], dtype=torch.int32)
        pool_k = cache_k.view(batch, pages, 4, hk, d)[:, [2, 1, 0]].reshape(batch * pages, 4, hk, d).clone()
        pool_v = cache_v.view(batch, pages, 4, hk, d)[:, [2, 1, 0]].reshape(batch * pages, 4, hk, d).clone()
        out, lse = tg.flash_attn_with_kvcache(*on(device, q, pool_k, pool_v),
                                              block_table=table.to(device), **kw)
    else:
        caches = on(device, cache_k, cache_v)
        out, lse = tg.flash_attn_with_kvcache(q.to(device), *caches, **kw)
        assert torch.equal(caches[0].cpu().view(torch.uint8), want_k.view(torch.uint8))
        assert torch.equal(caches[1].cpu().view(torch.uint8), want_v.view(torch.uint8))
    assert out.dtype == torch.bfloat16 and out.shape == (batch, 1, h, d) and out.device.type == device
    out, lse = out.cpu(), lse.cpu()
    for b in range(batch):
        n = int(lengths[b]) + 1
        qf = q[b].double() * qd[b].double().repeat_interleave(h // hk)[None, :, None]
        kf = want_k[b, :n].double() * kd[b].double()[None, :, None]
        vf = want_v[b, :n].double() * vd[b].double()[None, :, None]
        ref_out, ref_lse = reference(qf, kf, vf, causal=True)
        torch.testing.assert_close(out[b].double(), ref_out, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(lse[b].double(), ref_lse, **LSE_TOL[device])


def test_fp8_kvcache_with_a_misshaped_descale_writes_nothing():
    q = torch.randn(2, 1, 4, 16).to(FP8)
    cache = torch.randn(2, 8, 2, 16).to(FP8)
    before = cache.clone()
    new = torch.randn(2, 1, 2, 16).to(FP8)
    with pytest.raises(ValueError, match=r"k_descale must be \(batch, nheads_k\) = \(2, 2\), got \[2\]"):
        tg.flash_attn_with_kvcache(q, cache, cache.clone(), k=new, v=new, cache_seqlens=3,
                                   k_descale=torch.ones(2))
    assert torch.equal(cache.view(torch.uint8), before.view(torch.uint8))
