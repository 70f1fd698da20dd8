"""Inputs at the edges of the attention API: empty tensors, head dims that disagree, windows
wider than any sequence, scales of every sign, NaN and infinity in the inputs, and arguments
of the wrong kind. Where FlashAttention or torch defines the behaviour, the test says which."""
import math

import pytest
import tilegrid as tg
from conftest import DEVICES
import torch
import torch.nn.functional as F
from attention_reference import reference

# ---- empty tensors: correctly shaped outputs and gradients, as torch gives them ---------------


@pytest.mark.parametrize("shape_q,shape_k", [
    ((2, 0, 4, 64), (2, 0, 4, 64)),   # no queries and no keys
    ((0, 7, 4, 64), (0, 9, 4, 64)),   # no sequences
    ((2, 0, 4, 64), (2, 5, 2, 64)),   # no queries: dk and dv are zero
])
def test_empty_dense_batches_give_empty_outputs_and_gradients(shape_q, shape_k):
    q = torch.randn(shape_q, requires_grad=True)
    k, v = (torch.randn(shape_k, requires_grad=True) for _ in range(2))
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    dq, dk, dv = torch.autograd.grad(out.sum() + lse.sum(), (q, k, v))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert torch.equal(dk, torch.zeros_like(k)) and torch.equal(dv, torch.zeros_like(v))


def test_queries_without_keys_get_zero_output_and_minus_infinity():
    # torch's SDPA (math) gives zeros for a softmax over no keys; FlashAttention's lse is -inf.
    q = torch.randn(2, 5, 4, 64, requires_grad=True)
    k, v = (torch.randn(2, 0, 4, 64, requires_grad=True) for _ in range(2))
    out, lse = tg.flash_attn_func(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros_like(q)) and torch.isneginf(lse).all()
    (dq,) = torch.autograd.grad(out, (q,), torch.randn_like(out))
    assert torch.equal(dq, torch.zeros_like(q))


@pytest.mark.parametrize("lengths", [[], [0, 0, 0]])
def test_empty_varlen_batches_give_empty_outputs_and_gradients(lengths):
    cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q, k, v = (torch.randn(0, 4, 64, requires_grad=True) for _ in range(3))
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu, cu, 0, 0, return_lse=True)
    assert out.shape == (0, 4, 64) and lse.shape == (4, 0)
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v), allow_unused=True)
    assert dq.shape == dk.shape == dv.shape == (0, 4, 64)


# ---- head dimensions: one for q, k and v, checked before any padding --------------------------


@pytest.mark.parametrize("dq,dk", [(64, 32), (48, 64), (32, 100)])
def test_q_and_k_head_dims_that_differ_are_refused_naming_both(dq, dk):
    q, k = torch.randn(1, 8, 2, dq), torch.randn(1, 8, 2, dk)
    for v in (k, torch.randn(1, 8, 2, dq)):
        with pytest.raises(ValueError, match=rf"q and k must have the same head dimension, got q's {dq} .* k's {dk}"):
            tg.flash_attn_func(q, k, v)
    with pytest.raises(ValueError, match=rf"q and k must have the same head dimension, got q's {dq} .* k's {dk}"):
        tg.flash_attn_varlen_func(q[0], k[0], k[0], *(torch.tensor([0, 8], dtype=torch.int32),) * 2, 8, 8)


def test_q_and_k_head_dims_that_differ_are_refused_by_the_cpp_api():
    """The C++ entry point checks it too, before the supported head dims (which name q only)."""
    for dq, dk in ((64, 128), (80, 64)):
        q, k = torch.randn(1, 8, 2, dq), torch.randn(1, 8, 2, dk)
        with pytest.raises(ValueError, match=rf"got q's {dq} \(q shape .*\) and k's {dk}"):
            tg._C.flash_attn_forward(q, k, k, None, False, -1, -1, 0.0, torch.empty_like(q), None, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dqk, dv", [(192, 128), (64, 128), (64, 32)])
def test_a_head_dim_of_v_of_its_own(device, dqk, dv):
    """v's head dim may differ from q's and k's (MLA: 192 and 128), as in FlashAttention 3: the
    output and dv have v's, the default scale is q's; forward and backward against float64."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q = torch.randn(2, 37, 4, dqk, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 45, 2, dqk, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 45, 2, dv, device=device, dtype=dtype, requires_grad=True)
    out = tg.flash_attn_func(q, k, v, causal=True)
    assert out.shape == (2, 37, 4, dv)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    kk, vv = k64.repeat_interleave(2, dim=2), v64.repeat_interleave(2, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q64, kk) / dqk ** 0.5
    s = s.masked_fill(torch.ones(37, 45, dtype=torch.bool, device=device).triu(45 - 37 + 1), float("-inf"))
    want = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), vv)
    want_grads = torch.autograd.grad(want, (q64, k64, v64), grad.double())
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    for g, w in zip(got, want_grads):
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * max(1.0, w.abs().max().item()))


def test_head_dims_past_256_name_both():
    q = torch.randn(1, 8, 2, 64)
    with pytest.raises(ValueError, match="at most 256, got q's and k's 64 and v's 320"):
        tg.flash_attn_func(q, q, torch.randn(1, 8, 2, 320))


# ---- windows wider than any sequence are no window ---------------------------------------------

HUGE = 2**63 - 1


@pytest.mark.parametrize("window,unbounded", [
    ((HUGE, -1), (-1, -1)), ((-1, HUGE), (-1, -1)), ((HUGE, HUGE), (-1, -1)), ((HUGE, 0), (-1, 0)),
    ((3, HUGE), (3, -1)), ((2**70, 2), (-1, 2)), ((17 + 29, -1), (-1, -1)),
])
def test_huge_windows_equal_the_unbounded_result_forward_and_backward(window, unbounded):
    """FlashAttention's -1 means unbounded; any window of seqlen_q + seqlen_k keys or more
    reaches past every end of the sequence and is the same mask (no int64 overflow)."""
    q = torch.randn(2, 17, 2, 64, requires_grad=True)
    k, v = (torch.randn(2, 29, 2, 64, requires_grad=True) for _ in range(2))
    for causal in (False, True):
        out, lse = tg.flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)
        want, want_lse = tg.flash_attn_func(q, k, v, causal=causal, window_size=unbounded, return_lse=True)
        assert torch.equal(out, want) and torch.equal(lse, want_lse)
        for b in range(2):
            ref, ref_lse = reference(q[b].detach(), k[b].detach(), v[b].detach(), causal=causal, window=unbounded)
            assert (out[b].double() - ref).abs().max() <= 2e-5
            finite = torch.isfinite(ref_lse)
            assert torch.equal(torch.isfinite(lse[b]), finite)
            assert (lse[b].double()[finite] - ref_lse[finite]).abs().max() <= 1e-4
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), dout)
        expected = torch.autograd.grad(want, (q, k, v), dout)
        for g, e in zip(got, expected):
            assert torch.equal(g, e)


def test_huge_windows_equal_the_unbounded_result_in_varlen_batches():
    lens_q, lens_k = [5, 0, 17, 3], [9, 3, 17, 0]
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q = torch.randn(sum(lens_q), 4, 64, requires_grad=True)
    k, v = (torch.randn(sum(lens_k), 2, 64, requires_grad=True) for _ in range(2))
    args = (q, k, v, cu_q, cu_k, max(lens_q), max(lens_k))
    for window, unbounded in (((HUGE, HUGE), (-1, -1)), ((HUGE, 0), (-1, 0)), ((1, HUGE), (1, -1))):
        out, lse = tg.flash_attn_varlen_func(*args, window_size=window, return_lse=True)
        want, want_lse = tg.flash_attn_varlen_func(*args, window_size=unbounded, return_lse=True)
        assert torch.equal(out, want) and torch.equal(lse, want_lse)
        dout = torch.randn_like(out)
        for g, e in zip(torch.autograd.grad(out, (q, k, v), dout), torch.autograd.grad(want, (q, k, v), dout)):
            assert torch.equal(g, e)


def test_the_cpp_api_takes_int64_max_windows_as_unbounded():
    q, k, v = torch.randn(1, 9, 2, 64), torch.randn(1, 13, 2, 64), torch.randn(1, 13, 2, 64)
    results = []
    for window in ((HUGE, HUGE), (-1, -1)):
        out, lse = torch.empty_like(q), torch.empty(1, 2, 9)
        tg._C.flash_attn_forward(q, k, v, None, False, *window, 0.0, out, lse, 0)
        results.append((out, lse))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert torch.isfinite(results[0][1]).all()


# ---- softmax_scale: None is 1/sqrt(head_dim); any other float is the scale, as in FA ----------


def sdpa_math(q, k, v, **kw):
    """torch's math backend on (batch, seqlen, heads, headdim) tensors, in float64."""
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v)), **kw)
    return out.transpose(1, 2)


@pytest.mark.parametrize("head_dim", [40, 64, 100])
def test_the_default_scale_is_one_over_sqrt_of_the_given_head_dim(head_dim):
    # 40 and 100 are padded to 64 and 128 for the kernels; the scale is not theirs.
    q, k, v = (torch.randn(2, 23, 2, head_dim) for _ in range(3))
    out = tg.flash_attn_func(q, k, v)
    torch.testing.assert_close(out.double(), sdpa_math(q, k, v), atol=2e-5, rtol=0)
    assert torch.equal(out, tg.flash_attn_func(q, k, v, softmax_scale=1 / math.sqrt(head_dim)))


@pytest.mark.parametrize("causal", [False, True])
def test_scale_zero_weighs_every_visible_key_alike(causal):
    """FA: `if softmax_scale is None: softmax_scale = d ** -0.5`, so 0.0 is a scale of 0."""
    q = torch.randn(1, 20, 2, 48, requires_grad=True)
    k, v = (torch.randn(1, 20, 2, 48, requires_grad=True) for _ in range(2))
    out, lse = tg.flash_attn_func(q, k, v, softmax_scale=0.0, causal=causal, return_lse=True)
    ref, _ = reference(q[0].detach(), k[0].detach(), v[0].detach(), scale=0.0, causal=causal)
    torch.testing.assert_close(out[0].double(), ref, atol=2e-5, rtol=0)
    visible = torch.arange(1, 21) if causal else torch.full((20,), 20)
    torch.testing.assert_close(lse[0].double(), visible.double().log().expand(2, 20), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.double(), sdpa_math(q, k, v, scale=0.0, is_causal=causal), atol=2e-5, rtol=0)
    dq, dk, _ = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert torch.equal(dq, torch.zeros_like(dq)) and torch.equal(dk, torch.zeros_like(dk))


@pytest.mark.parametrize("scale", [-0.3, -1.0])
def test_a_negative_scale_is_taken_as_flash_attention_takes_it(scale):
    """FA accepts any float; softmax(scale * q.k) for scale < 0 against float64 autograd."""
    q, k, v = (torch.randn(1, 31, 2, 64, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        leaves = [t.float().requires_grad_() for t in (q, k, v)]
        out, lse = tg.flash_attn_func(*leaves, softmax_scale=scale, causal=causal, return_lse=True)
        ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        ref, ref_lse = reference(*(t[0] for t in ref_leaves), scale=scale, causal=causal)
        torch.testing.assert_close(out[0].double(), ref, atol=2e-5, rtol=0)
        torch.testing.assert_close(lse[0].double(), ref_lse, atol=1e-4, rtol=0)
        dout = torch.randn_like(ref)
        got = torch.autograd.grad(out[0], leaves, dout.float())
        want = torch.autograd.grad(ref, ref_leaves, dout)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.double(), w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("scale", [-0.7, 0.0])
def test_the_cuda_rewrite_of_a_scale_not_above_zero_gives_the_same_attention(scale):
    """On CUDA without softcap, flash_attn_func runs scale s <= 0 as (-q, -s) or (0 * q, 1):
    the same result and gradients, checked here on the CPU reference."""
    from tilegrid.flash_attn import _positive_scale
    q, k, v = (torch.randn(1, 19, 2, 64, requires_grad=True) for _ in range(3))
    q2, s2 = _positive_scale(q, scale)
    assert s2 > 0
    out, lse = tg.flash_attn_func(q2, k, v, softmax_scale=s2, causal=True, return_lse=True)
    want, want_lse = tg.flash_attn_func(q, k, v, softmax_scale=scale, causal=True, return_lse=True)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=0)
    torch.testing.assert_close(lse, want_lse, atol=1e-5, rtol=0)
    dout = torch.randn_like(out)
    for g, w in zip(torch.autograd.grad(out, (q, k, v), dout), torch.autograd.grad(want, (q, k, v), dout)):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scale", [1e300, -1e39, float("inf"), float("nan"), 2**2000])
def test_a_scale_not_finite_in_float32_is_refused_before_any_kernel(scale):
    q = torch.randn(1, 8, 2, 64)
    with pytest.raises(ValueError, match="softmax_scale must be finite in float32"):
        tg.flash_attn_func(q, q, q, softmax_scale=scale)
    if isinstance(scale, float):
        with pytest.raises(ValueError, match="softmax_scale must be finite in float32"):
            tg._C.flash_attn_forward(q, q, q, scale, False, -1, -1, 0.0, torch.empty_like(q), None, 0)
    with pytest.raises(ValueError, match="softcap must be finite in float32"):
        tg.flash_attn_func(q, q, q, softcap=abs(scale))


def _hard_maximum(q, k, v):
    """Each query's v row at its best key (scores in float64), as [b, sq, h, d]."""
    best = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()).argmax(-1)  # [b, h, sq]
    rows = best[..., None].expand(-1, -1, -1, v.shape[-1])
    return torch.gather(v.double().transpose(1, 2), 2, rows).transpose(1, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernels")
@pytest.mark.parametrize("kernel", ["auto", "portable"])
@pytest.mark.parametrize("head_dim", [4, 64, 96, 128, 256])
def test_a_huge_scale_gives_the_hard_maximum_on_cuda(kernel, head_dim):
    """softmax_scale 1e30: each row is v at its best key, the limit torch's math backend and
    the CPU reference give. With the usual exponent fma(s, scale, -max * scale) the best key's
    own exponent would be the product's rounding error (up to ~2^76 here) and the row NaN or 0;
    rows whose base is that large take the exact exponent (s - max) * scale
    (src/attention/common/softmax_base.cuh). The decode kernel (flash_attn_with_kvcache, one
    query) shares it."""
    from tilegrid import kernel_choice
    g = torch.Generator().manual_seed(head_dim)
    q, k, v = (torch.randn(2, 40, 2, head_dim, generator=g).half().cuda() for _ in range(3))
    want = _hard_maximum(q, k, v)
    with kernel_choice.override("attention", kernel):
        out, lse = tg.flash_attn_func(q, k, v, softmax_scale=1e30, return_lse=True)
    assert torch.equal(out.double(), want)  # P is exactly 1 at the best key, 0 elsewhere
    s_max = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()).amax(-1)
    torch.testing.assert_close(lse, s_max * 1e30, rtol=1e-5, atol=0)
    if head_dim in (64, 128, 256):
        one = tg.flash_attn_with_kvcache(q[:, :1], k, v, softmax_scale=1e30)
        assert torch.equal(one.double(), want[:, :1])


def _scores_near_a_tie(head_dim):
    """q [1, 3, 2, d] and k, v [1, 5, 2, d] whose scores (exact in float32) are 8 at key 0,
    8 - 2^-20 at key 3 and 0 elsewhere: with softmax_scale 2e6 the row base is ~2.3e7, past
    the exact-exponent threshold, and key 3 still weighs exp(-1.9) ~ 0.15 against key 0."""
    q = torch.zeros(1, 3, 2, head_dim)
    q[..., 0], q[..., 1] = 1.0, 2.0**-10
    k = torch.zeros(1, 5, 2, head_dim)
    k[:, 0, :, 0] = 8.0
    k[:, 3, :, 0], k[:, 3, :, 1] = 8.0, -(2.0**-10)
    v = torch.randn(1, 5, 2, head_dim, generator=torch.Generator().manual_seed(head_dim))
    return q.half(), k.half(), v.half()


_WHERE = [
    "cpu",
    pytest.param("auto", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")),
    pytest.param("portable", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")),
]


def _run_on(where, fn, *tensors):
    """fn(*tensors) on the CPU, or on CUDA with the attention kernel `where`; the result on the CPU."""
    from tilegrid import kernel_choice
    if where == "cpu":
        return fn(*tensors)
    with kernel_choice.override("attention", where):
        return fn(*(t.cuda() for t in tensors)).cpu()


@pytest.mark.parametrize("where", _WHERE)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_a_row_past_the_exact_exponent_threshold_keeps_its_softmax_weights(where, head_dim):
    """Not only the hard maximum: in a row that takes the exact exponent, a key just below the
    maximum keeps its weight (float64 reference), in the forward and the decode kernel."""
    q, k, v = _scores_near_a_tie(head_dim)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * 2e6
    assert s[0, 0, 0, 0] - s[0, 0, 0, 3] == 2.0**-20 * 2e6  # the scores the kernels see, exactly
    want = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v.double())
    out = _run_on(where, lambda q, k, v: tg.flash_attn_func(q, k, v, softmax_scale=2e6), q, k, v)
    torch.testing.assert_close(out.double(), want, atol=2e-3, rtol=2e-3)
    one = _run_on(where, lambda q, k, v: tg.flash_attn_with_kvcache(q, k, v, softmax_scale=2e6),
                  q[:, :1], k, v)
    torch.testing.assert_close(one.double(), want[:, :1], atol=2e-3, rtol=2e-3)


def _best_key_after_a_near_tie(head_dim, delta_log2):
    """q [1, 2, 1, d] and k, v [1, 300, 1, d] whose scores (exact in float32) are 8 - 2^delta_log2
    at key 3, 8 at key 257 and 0 elsewhere: the row's maximum grows in a later key tile (and
    another warp of the decode kernel), so its partial sums change base."""
    q = torch.zeros(1, 2, 1, head_dim)
    q[..., 0], q[..., 1] = 1.0, 2.0 ** (delta_log2 / 2)
    k = torch.zeros(1, 300, 1, head_dim)
    k[:, 3, :, 0], k[:, 3, :, 1] = 8.0, -(2.0 ** (delta_log2 / 2))
    k[:, 257, :, 0] = 8.0
    v = torch.randn(1, 300, 1, head_dim, generator=torch.Generator().manual_seed(head_dim))
    return q.half(), k.half(), v.half()


@pytest.mark.parametrize("where", _WHERE)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_large_scales_keep_the_weights_when_the_maximum_grows_in_a_later_tile(where, head_dim):
    """Scales from 1e2 to 2e6: the row's exponent base (8 x scale x log2 e) runs from ~1e3 past
    the exact-exponent threshold 2^16 to past 2^24, and the earlier key, 2^delta below the
    best, weighs between exp(-1) and exp(-3) of it. Before and after the maximum moves, the
    partial sums must meet on one base (float64 reference), in the forward and the decode
    kernel, unsplit and split."""
    for scale in [1e2, 3e3, 5.5e3, 5.7e3, 6e3, 3e4, 4e5, 1.4e6, 1.5e6, 2e6]:
        delta_log2 = 2 * round(math.log2(1.5 / scale) / 2)  # an even power: q and k hold its root
        q, k, v = _best_key_after_a_near_tie(head_dim, max(delta_log2, -20))
        s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * scale
        want = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v.double())
        assert 0.04 < float(torch.softmax(s, -1)[0, 0, 0, 3]) < 0.5  # the near key counts
        out = _run_on(where, lambda q, k, v: tg.flash_attn_func(q, k, v, softmax_scale=scale),
                      q, k, v)
        torch.testing.assert_close(out.double(), want, atol=2e-3, rtol=2e-3,
                                   msg=lambda m: f"softmax_scale {scale}: {m}")
        for splits in (1, 3):  # 3: keys 3 and 257 in different splits of the decode kernel
            one = _run_on(where, lambda q, k, v: tg.flash_attn_with_kvcache(
                q, k, v, softmax_scale=scale, num_splits=splits), q[:, :1], k, v)
            torch.testing.assert_close(one.double(), want[:, :1], atol=2e-3, rtol=2e-3,
                                       msg=lambda m: f"softmax_scale {scale}, {splits} splits: {m}")


def _gradients(q, k, v, dout, scale):
    """(dq, dk, dv) of flash_attn_func at softmax_scale `scale`, on q's device, as float64."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    tg.flash_attn_func(q, k, v, softmax_scale=scale).backward(dout)
    return [t.grad.double().cpu() for t in (q, k, v)]


def _reference_gradients(q, k, v, dout, scale):
    """float64 (dq, dk, dv) and, for each, the sizes of the terms it sums (the same products
    of absolute values): dQ = scale dS K sums terms that cancel, so its error is bounded
    against them rather than against the result."""
    q, k, v, dout = (t.double() for t in (q, k, v, dout))
    p = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) * scale, -1)
    dp = torch.einsum("bqhd,bkhd->bhqk", dout, v)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    grads = [scale * torch.einsum("bhqk,bkhd->bqhd", ds, k),
             scale * torch.einsum("bhqk,bqhd->bkhd", ds, q), torch.einsum("bhqk,bqhd->bkhd", p, dout)]
    sizes = [scale * torch.einsum("bhqk,bkhd->bqhd", ds.abs(), k.abs()),
             scale * torch.einsum("bhqk,bqhd->bkhd", ds.abs(), q.abs()),
             torch.einsum("bhqk,bqhd->bkhd", p, dout.abs())]
    return grads, sizes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernels")
@pytest.mark.parametrize("backward", ["auto", "portable", "simt"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_backward_gradients_are_right_below_the_lse_limit_and_nan_past_it(backward, head_dim):
    """The backward recomputes P from the stored log-sum-exp, whose rounding is P's error
    (src/attention/common/flash_bwd_score.cuh): at softmax_scale 5.7e3 (lse ~6.6e4 in log2
    units, past the forward's exact-exponent threshold, below the backward's 2^18) each
    gradient meets the float64 reference within 2% of the largest sum of its terms' sizes (the
    CPU kernels: 0.02-0.1%); at 1e30 they come back NaN, never finite and wrong."""
    from tilegrid import kernel_choice
    q, k, v = _best_key_after_a_near_tie(head_dim, -12)  # the near key weighs exp(-1.39)
    # dO scaled down: dQ's terms are scale x dS x K, ~10 x 5.7e3 x 8 with unit dO, past
    # float16's 65504.
    dout = (torch.randn(q.shape, generator=torch.Generator().manual_seed(7)) / 64).half()
    want, sizes = _reference_gradients(q, k, v, dout, 5.7e3)
    with kernel_choice.override("attention_backward", backward):
        got = _gradients(*(t.cuda() for t in (q, k, v, dout)), 5.7e3)
        for name, g, w, size in zip("qkv", got, want, sizes):
            err = float((g - w).abs().max())
            assert err <= 0.02 * float(size.max()), f"d{name}: error {err} against terms of {float(size.max())}"
        past = _gradients(*(t.cuda() for t in (q, k, v, dout)), 1e30)
    for name, g in zip("qkv", past):
        assert torch.isnan(g).all(), f"d{name} at softmax_scale 1e30: {int(torch.isnan(g).sum())} NaN of {g.numel()}"


@pytest.mark.parametrize("where", _WHERE)
def test_a_huge_scale_averages_tied_best_keys(where):
    """softmax_scale 1e30 with two keys tied at the maximum: each weighs exactly 1/2."""
    q, k, v = _scores_near_a_tie(128)
    k[:, 3, :, 1] = 0  # key 3 now ties key 0 at 8
    want = (v[:, 0].double() + v[:, 3].double()) / 2
    out = _run_on(where, lambda q, k, v: tg.flash_attn_func(q, k, v, softmax_scale=1e30), q, k, v)
    torch.testing.assert_close(out.double(), want[:, None].expand_as(out), atol=1e-3, rtol=1e-3)


# ---- NaN and infinity: propagated as torch's math backend propagates them ----------------------


def sdpa_math_lse(q, k, scale=None):
    """log-sum-exp of the float64 scores, (batch, heads, seqlen_q), no mask."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * scale
    return torch.logsumexp(s, dim=-1)


@pytest.mark.parametrize("poison", ["nan q", "nan k", "inf q", "-inf q", "nan v", "inf k"])
def test_nan_and_inf_in_the_inputs_propagate_as_in_torch_math_backend(poison):
    q, k, v = (torch.randn(2, 9, 2, 64) for _ in range(3))
    if poison == "-inf q":
        k = k.abs()  # every score of the row is -inf: torch's math backend gives 0 (safe softmax)
    which, at = {"q": q, "k": k, "v": v}[poison.split()[1]], (1, 4, 1, 7)
    which[at] = float(poison.split()[0])
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = tg.flash_attn_func(*leaves, return_lse=True)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = sdpa_math(*ref_leaves)
    assert out.isnan().any() or poison == "-inf q"
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=0, equal_nan=True)
    # lse against the float64 logsumexp of the scores: equal where that is finite or -inf; where
    # a +inf score makes it +inf, the softmax is inf / inf and lse is NaN with the output row.
    ref_lse = sdpa_math_lse(q, k)
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse.double()[finite], ref_lse[finite], atol=1e-4, rtol=0)
    assert torch.equal(lse.isneginf(), ref_lse.isneginf())
    assert lse[ref_lse.isnan() | ref_lse.isposinf()].isnan().all()
    dout = torch.randn_like(ref)
    got = torch.autograd.grad(out, leaves, dout.float())
    want = torch.autograd.grad(ref, ref_leaves, dout)
    if poison == "-inf q":
        # A row whose scores are all -inf is a row that sees no key (FlashAttention's and
        # tilegrid's convention): it adds nothing to dk, where torch's autograd forms
        # 0 * q = 0 * -inf = NaN in dk's column 7.
        want[1][1, :, 1, 7] = got[1][1, :, 1, 7].double()
    for g, w in zip(got, want):
        assert torch.equal(g.isnan(), w.isnan())
        torch.testing.assert_close(g.double().nan_to_num(), w.nan_to_num(), atol=1e-4, rtol=1e-4)


def test_a_nan_key_reaches_only_the_queries_that_see_it():
    """FlashAttention never reads a key outside a query's window, so with causal=True a NaN in
    key 6 makes rows 6.. NaN and leaves rows 0..5 as they were (torch's math backend, which
    multiplies the masked probabilities of 0 by it, would make every row NaN)."""
    q, k, v = (torch.randn(1, 12, 2, 64) for _ in range(3))
    clean = tg.flash_attn_func(q, k, v, causal=True)
    k[0, 6, 0, 3] = float("nan")
    out = tg.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(out[0, :6], clean[0, :6])
    assert out[0, 6:, 0].isnan().all() and torch.equal(out[0, :, 1], clean[0, :, 1])


def test_a_nan_row_never_gives_a_finite_plausible_output_in_varlen_batches():
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    q, k, v = (torch.randn(12, 2, 64) for _ in range(3))
    q[7, 1, 0] = float("nan")
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, return_lse=True)
    assert out[7, 1].isnan().all() and lse[1, 7].isnan()
    assert not out[:7].isnan().any() and not out[8:].isnan().any()


# ---- arguments of the wrong kind: clear errors from Python, never a signature dump --------------


@pytest.mark.parametrize("kwargs,error,message", [
    ({"window_size": (1.5, 2)}, TypeError, "window_size must be an integer, got float"),
    ({"window_size": ("a", 2)}, TypeError, "window_size must be an integer, got str"),
    ({"window_size": (-2, 0)}, ValueError, r"window sizes must be >= -1 \(-1: unbounded\), got \(-2, 0\)"),
    ({"window_size": 3}, ValueError, "window_size must be a pair"),
    ({"softmax_scale": [0.1]}, TypeError, "softmax_scale must be a float, got list"),
    ({"softmax_scale": "0.1"}, TypeError, "softmax_scale must be a float, got str"),
    ({"softcap": [1.0]}, TypeError, "softcap must be a float, got list"),
    ({"softcap": -1.0}, ValueError, "softcap must be >= 0"),
])
def test_arguments_of_the_wrong_kind_get_clear_errors(kwargs, error, message):
    q = torch.randn(1, 8, 2, 64)
    with pytest.raises(error, match=message):
        tg.flash_attn_func(q, q, q, **kwargs)


def test_windows_given_as_lists_or_numpy_or_past_int64_are_taken():
    np = pytest.importorskip("numpy")
    q, k, v = (torch.randn(1, 8, 2, 64) for _ in range(3))
    want = tg.flash_attn_func(q, k, v, window_size=(1, 2))
    assert torch.equal(tg.flash_attn_func(q, k, v, window_size=[1, 2]), want)
    assert torch.equal(tg.flash_attn_func(q, k, v, window_size=(np.int64(1), np.int32(2))), want)
    assert torch.equal(tg.flash_attn_func(q, k, v, window_size=(2**64, 2**100)), tg.flash_attn_func(q, k, v))


@pytest.mark.parametrize("max_seqlen,error,message", [
    (2**64, ValueError, r"max_seqlen_q must be in \[0, 2\*\*63 - 1\], got 18446744073709551616"),
    (-1, ValueError, r"max_seqlen_q must be in \[0, 2\*\*63 - 1\], got -1"),
    ([8], TypeError, "max_seqlen_q must be an integer, got list"),
    (8.0, TypeError, "max_seqlen_q must be an integer, got float"),
])
def test_varlen_lengths_of_the_wrong_kind_get_clear_errors(max_seqlen, error, message):
    q, cu = torch.randn(8, 2, 64), torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(error, match=message):
        tg.flash_attn_varlen_func(q, q, q, cu, cu, max_seqlen, 8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_loose_max_seqlen_gives_what_the_tight_one_gives(device, head_dim):
    """max_seqlen_q / max_seqlen_k are bounds, as in FlashAttention: one far above the longest
    sequence (here 2**40, past what a launch grid holds) gives the same output, forward and
    backward (deterministic), bit for bit."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    cu = torch.tensor([0, 3, 3, 130], dtype=torch.int32, device=device)
    q, k, v = (torch.randn(130, 4, head_dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    results = []
    for bound in (127, 2**40):
        out = tg.flash_attn_varlen_func(q, k, v, cu, cu, bound, bound, causal=True, deterministic=True)
        results.append((out, *torch.autograd.grad(out.float().square().sum(), (q, k, v))))
    for tight, loose in zip(*results):
        assert torch.equal(tight, loose)



def _varlen_entry_points():
    """(op, the offsets it names, a call passing `bad` as those offsets and tensors elsewhere)."""
    q, cu = torch.randn(8, 2, 64), torch.tensor([0, 3, 8], dtype=torch.int32)
    qkv, kv = torch.randn(8, 3, 2, 64), torch.randn(8, 2, 2, 64)
    return [
        ("flash_attn_varlen_func", "cu_seqlens_q",
         lambda bad: tg.flash_attn_varlen_func(q, q, q, bad, cu, 5, 5)),
        ("flash_attn_varlen_func", "cu_seqlens_k",
         lambda bad: tg.flash_attn_varlen_func(q, q, q, cu, bad, 5, 5)),
        ("flash_attn_varlen_qkvpacked_func", "cu_seqlens",
         lambda bad: tg.flash_attn_varlen_qkvpacked_func(qkv, bad, 5)),
        ("flash_attn_varlen_kvpacked_func", "cu_seqlens_q",
         lambda bad: tg.flash_attn_varlen_kvpacked_func(q, kv, bad, cu, 5, 5)),
        ("flash_attn_varlen_kvpacked_func", "cu_seqlens_k",
         lambda bad: tg.flash_attn_varlen_kvpacked_func(q, kv, cu, bad, 5, 5)),
    ]


@pytest.mark.parametrize("case", range(len(_varlen_entry_points())))
@pytest.mark.parametrize("bad,given", [
    ([0, 3, 8], r"list \(\[0, 3, 8\]\)"),
    ((0, 3, 8), r"tuple \(\(0, 3, 8\)\)"),
    (None, r"NoneType \(None\)"),
    (8, r"int \(8\)"),
])
def test_offsets_that_are_not_tensors_are_refused_naming_them_before_any_kernel(
        monkeypatch, case, bad, given):
    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was reached")
    for name in ("flash_attn_varlen_forward", "flash_attn_varlen_backward"):
        monkeypatch.setattr(tg.flash_attn._C, name, no_kernel)
    op, name, call = _varlen_entry_points()[case]
    expected = r"an int32 torch.Tensor of shape \(batch \+ 1,\) on q's device"
    with pytest.raises(TypeError, match=rf"{op}: {name} must be {expected}, got {given}"):
        call(bad)


def test_offsets_given_as_a_numpy_array_are_refused_naming_them():
    np = pytest.importorskip("numpy")
    q, cu = torch.randn(8, 2, 64), torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(TypeError, match=r"cu_seqlens_q must be an int32 torch.Tensor .* got ndarray"):
        tg.flash_attn_varlen_func(q, q, q, np.array([0, 8], dtype=np.int32), cu, 8, 8)


def test_kvcache_lengths_given_as_a_list_are_refused_naming_them():
    q, cache = torch.randn(2, 1, 2, 64), torch.randn(2, 8, 2, 64)
    with pytest.raises(TypeError, match=r"cache_seqlens must be an int32 tensor of shape \[2\] .* got list"):
        tg.flash_attn_with_kvcache(q, cache, cache.clone(), cache_seqlens=[3, 4])


@pytest.mark.parametrize("dtype", [torch.int16, torch.complex64, torch.int32])
def test_dtypes_the_kernels_do_not_take_are_refused_naming_q(dtype):
    """Checked in Python: int16 and complex would otherwise fail in the DLPack conversion,
    naming no argument."""
    q = torch.zeros(1, 4, 2, 16, dtype=dtype)
    with pytest.raises(TypeError, match=rf"flash_attn_func: q must be float16, bfloat16 or float32, got "
                                        rf"{str(dtype).removeprefix('torch.')}"):
        tg.flash_attn_func(q, q, q)
    k = torch.randn(1, 4, 2, 16)
    with pytest.raises(TypeError, match="flash_attn_func: v must be float32, got int16"):
        tg.flash_attn_func(k, k, k.to(torch.int16))


def test_k_and_v_of_different_lengths_are_refused_with_the_shapes_given():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match=r"k and v must have the same shape but for the head dim, got k "
                                         r"\[1, 8, 2, 16\] and v \[1, 5, 2, 16\]"):
        tg.flash_attn_func(q, q, q[:, :5])


def test_kvcache_tensors_of_the_wrong_kind_raise_type_error():
    cache = torch.randn(2, 8, 2, 64)
    with pytest.raises(TypeError, match="flash_attn_with_kvcache: q must be a 4-D torch.Tensor, got list"):
        tg.flash_attn_with_kvcache([[1.0]], cache, cache.clone())


@pytest.mark.parametrize("pack_gqa", [None, True, False])
def test_pack_gqa_is_accepted_and_changes_nothing(pack_gqa):
    """FlashAttention 3's pack_gqa: a scheduling choice of its kernels, the same results."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, h, 16, generator=g) for h in (4, 2, 2))
    plain = tg.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(tg.flash_attn_func(q, k, v, causal=True, pack_gqa=pack_gqa), plain)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    varlen = tg.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 5, 5, causal=True, pack_gqa=pack_gqa)
    assert torch.equal(varlen, plain[0])
    cached = tg.flash_attn_with_kvcache(q, k.clone(), v.clone(), causal=True, pack_gqa=pack_gqa)
    assert torch.equal(cached, plain)


@pytest.mark.parametrize("call", ["dense", "varlen", "kvcache"])
def test_pack_gqa_of_another_type_is_refused_by_name(call):
    q = torch.randn(1, 4, 2, 16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    run = {"dense": lambda: tg.flash_attn_func(q, q, q, pack_gqa=1),
           "varlen": lambda: tg.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, pack_gqa="yes"),
           "kvcache": lambda: tg.flash_attn_with_kvcache(q, q.clone(), q.clone(), pack_gqa=0.5)}[call]
    with pytest.raises(TypeError, match="pack_gqa must be None, True or False"):
        run()


@pytest.mark.parametrize("num_splits", [0, 1])
def test_num_splits_0_and_1_run_unsplit(num_splits):
    """FlashAttention 3's num_splits in flash_attn_func: 1 and 0 (the implementation's choice)."""
    q, k, v = (torch.randn(1, 6, 2, 16) for _ in range(3))
    assert torch.equal(tg.flash_attn_func(q, k, v, num_splits=num_splits), tg.flash_attn_func(q, k, v))
    cu = torch.tensor([0, 6], dtype=torch.int32)
    assert torch.equal(tg.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 6, 6, num_splits=num_splits),
                       tg.flash_attn_func(q, k, v)[0])


@pytest.mark.parametrize("num_splits,error,message", [
    (2, NotImplementedError, "flash_attn_with_kvcache splits the keys"),
    (-1, ValueError, "num_splits must be >= 0, got -1"),
    (1.0, TypeError, "num_splits must be an int, got float"),
    (True, TypeError, "num_splits must be an int, got bool"),
])
def test_num_splits_other_values_are_refused_by_name(num_splits, error, message):
    q = torch.randn(1, 4, 2, 16)
    with pytest.raises(error, match=message):
        tg.flash_attn_func(q, q, q, num_splits=num_splits)
