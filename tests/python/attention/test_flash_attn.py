import math

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg

HEAD_DIMS = [64, 96, 128, 192, 256]
# Output tolerance (max abs error, unit-scale inputs): the output rounded once to its type.
ATOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def reference(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0):
    """float64 attention for one sequence: q [sq, hq, d], k/v [sk, hk, d] -> out, lse [hq, sq]."""
    q, k, v = q.double(), k.double(), v.double()
    sq, hq, d = q.shape
    sk, hk = k.shape[:2]
    k = k.repeat_interleave(hq // hk, dim=1)
    v = v.repeat_interleave(hq // hk, dim=1)
    scale = scale or 1 / math.sqrt(d)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    diagonal = i + sk - sq  # bottom-right alignment
    left, right = window
    if causal:
        right = 0
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= diagonal - left
    if right >= 0:
        allowed &= j <= diagonal + right
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for rows that see no key
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", p, v)
    return out, lse


def check(out, lse, ref_out, ref_lse, dtype):
    assert not out.isnan().any() and not lse.isnan().any()
    assert (out.double() - ref_out).abs().max().item() <= ATOL[dtype]
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    if finite.any():
        assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= 1e-4


@pytest.mark.parametrize("seqlen", [1, 17, 113, 128, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_reference_on_odd_seqlens(seqlen, causal):
    q = torch.randn(2, seqlen, 2, 64)
    k, v = torch.randn(2, seqlen, 2, 64), torch.randn(2, seqlen, 2, 64)
    out, lse = tg.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    for b in range(2):
        ro, rl = reference(q[b], k[b], v[b], causal=causal)
        check(out[b], lse[b], ro, rl, torch.float32)


def test_long_sequence_2049():
    q, k, v = (torch.randn(1, 2049, 1, 64) for _ in range(3))
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    ro, rl = reference(q[0], k[0], v[0], causal=True)
    check(out[0], lse[0], ro, rl, torch.float32)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_head_dim_and_dtype(head_dim, dtype):
    q = torch.randn(1, 33, 4, head_dim).to(dtype)
    k, v = torch.randn(1, 50, 4, head_dim).to(dtype), torch.randn(1, 50, 4, head_dim).to(dtype)
    out, lse = tg.flash_attn_func(q, k, v, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    ro, rl = reference(q[0], k[0], v[0])
    check(out[0], lse[0], ro, rl, dtype)


@pytest.mark.parametrize("sq,sk", [(17, 113), (113, 17), (5, 5)])
@pytest.mark.parametrize("window", [(-1, -1), (8, 0), (4, 4), (0, 0), (-1, 3)])
def test_causal_and_windows_align_bottom_right(sq, sk, window):
    q, k, v = torch.randn(1, sq, 2, 64), torch.randn(1, sk, 2, 64), torch.randn(1, sk, 2, 64)
    for causal in (False, True):
        out, lse = tg.flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)
        ro, rl = reference(q[0], k[0], v[0], causal=causal, window=window)
        check(out[0], lse[0], ro, rl, torch.float32)


def test_fully_masked_rows_give_zero_and_minus_infinity():
    # sq > sk with causal: the first sq - sk queries see no key.
    q, k, v = torch.randn(1, 10, 2, 64), torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64)
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.equal(out[0, :6], torch.zeros(6, 2, 64))
    assert torch.isneginf(lse[0, :, :6]).all() and torch.isfinite(lse[0, :, 6:]).all()


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1), (4, 4)])
def test_gqa_and_mqa(hq, hk):
    q, k, v = torch.randn(2, 40, hq, 128), torch.randn(2, 40, hk, 128), torch.randn(2, 40, hk, 128)
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    for b in range(2):
        ro, rl = reference(q[b], k[b], v[b], causal=True)
        check(out[b], lse[b], ro, rl, torch.float32)


def test_softcap_and_custom_scale():
    q, k, v = (torch.randn(1, 30, 2, 64) * 3 for _ in range(3))
    out, lse = tg.flash_attn_func(q, k, v, softmax_scale=0.3, softcap=5.0, return_lse=True)
    ro, rl = reference(q[0], k[0], v[0], scale=0.3, softcap=5.0)
    check(out[0], lse[0], ro, rl, torch.float32)


def test_matches_torch_sdpa_math_backend():
    q, k, v = (torch.randn(2, 4, 77, 64) for _ in range(3))  # SDPA layout (b, h, s, d)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = tg.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    torch.testing.assert_close(out.transpose(1, 2), ref, atol=2e-5, rtol=1e-4)


def test_varlen_with_mixed_and_zero_lengths():
    lens_q, lens_k = [5, 0, 17, 1, 0], [9, 3, 17, 0, 0]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(lens_q), 4, 64)
    k, v = torch.randn(sum(lens_k), 2, 64), torch.randn(sum(lens_k), 2, 64)
    for causal in (False, True):
        out, lse = tg.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True
        )
        assert lse.shape == (4, sum(lens_q))
        for b in range(len(lens_q)):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            if lens_q[b] == 0:
                continue
            ro, rl = reference(q[qs], k[ks], v[ks], causal=causal)
            check(out[qs], lse[:, qs], ro, rl, torch.float32)


def test_torch_compile_traces_the_op():
    q, k, v = (torch.randn(1, 16, 2, 64) for _ in range(3))
    f = torch.compile(lambda q, k, v: tg.flash_attn_func(q, k, v, causal=True) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(f(q, k, v), 2 * tg.flash_attn_func(q, k, v, causal=True))
    torch.library.opcheck(torch.ops.tilegrid.flash_attn_forward.default, (q, k, v, 0.0, True, -1, -1, 0.0))


class TestBadInputs:
    def test_unsupported_head_dim(self):
        q = torch.randn(1, 4, 2, 80)
        with pytest.raises(ValueError, match="head dimension must be 64, 96, 128, 192 or 256, got 80"):
            tg.flash_attn_func(q, q, q)

    def test_mismatched_heads(self):
        q, k = torch.randn(1, 4, 6, 64), torch.randn(1, 4, 4, 64)
        with pytest.raises(ValueError, match=r"heads of q \(6\) must be a multiple of heads of k and v \(4\)"):
            tg.flash_attn_func(q, k, k)

    def test_wrong_dtype(self):
        q = torch.randn(1, 4, 2, 64)
        with pytest.raises(TypeError, match="k must be float32, got float64"):
            tg.flash_attn_func(q, q.double(), q)

    def test_non_contiguous_head_dim(self):
        q = torch.randn(1, 4, 64, 2).transpose(2, 3)
        with pytest.raises(ValueError, match="must have a contiguous last dimension"):
            tg.flash_attn_func(q, q, q)

    def test_cu_seqlens_not_monotone(self):
        q = torch.randn(6, 2, 64)
        cu = torch.tensor([0, 4, 2, 6], dtype=torch.int32)
        with pytest.raises(ValueError, match="cu_seqlens_q must be non-decreasing"):
            tg.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)

    def test_window_size_shape(self):
        q = torch.randn(1, 4, 2, 64)
        with pytest.raises(ValueError, match="window_size must be a pair"):
            tg.flash_attn_func(q, q, q, window_size=3)
