"""tg.flash_attn_with_kvcache against a float64 reference written from FlashAttention's
documented semantics: the append in place, rotary embeddings, cache_batch_idx, cache_leftpad,
paged caches (block_table), GQA, windows, softcap; and bad input refused before the cache is
written. Both attention paths are tested: the cache read in place (forward_kvcache; on CUDA
the decode kernel, at its head dims 64, 128 and 256) and the gather path."""

import math

import pytest
import torch

import tilegrid as tg
import tilegrid.flash_attn_kvcache as kvcache_module
from conftest import DEVICES

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def rotate(x, cos, sin, interleaved):
    """x [s, h, d] (float64) rotated on its first 2 cos.shape[-1] dims, cos/sin [s, rot/2]."""
    rot = 2 * cos.shape[-1]
    head, tail = x[..., :rot], x[..., rot:]
    c, s = cos[:, None, :], sin[:, None, :]
    if interleaved:
        a, b = head[..., 0::2], head[..., 1::2]
        out = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    else:
        a, b = head[..., :rot // 2], head[..., rot // 2:]
        out = torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    return torch.cat([out, tail], dim=-1)


def attention(q, k, v, scale, causal, window, softcap):
    """One sequence, float64: q [sq, h, d], k/v [sk, hk, d]; bottom-right aligned masks."""
    sq, h, _ = q.shape
    sk, hk, _ = k.shape
    k, v = k.repeat_interleave(h // hk, dim=1), v.repeat_interleave(h // hk, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    left, right = window
    if causal:
        right = 0
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, v), lse


def reference(q, k_cache, v_cache, k, v, cos, sin, lengths, rows, leftpad, pages, page, causal, window,
              softcap, interleaved, scale):
    """Expected output, lse and caches (float64), by the documented semantics."""
    q, k_cache, v_cache = q.double(), k_cache.double().clone(), v_cache.double().clone()
    batch, sq = q.shape[:2]
    new = 0 if k is None else k.shape[1]
    outs, lses = [], []
    for b in range(batch):
        n = int(lengths[b])
        qb = q[b]
        if cos is not None:
            windowed = causal or window != (-1, -1)
            pos_q = torch.arange(n, n + sq) if windowed else torch.full((sq,), n)
            qb = rotate(qb, cos.double()[pos_q], sin.double()[pos_q], interleaved)
        cells = torch.arange(0, n + new)

        def at(c):
            if pages is None:
                return (torch.full_like(c, int(rows[b])), c)
            return (pages[b, c // page].long(), c % page)

        if new:
            kb = k[b].double()
            if cos is not None:
                kb = rotate(kb, cos.double()[n:n + new], sin.double()[n:n + new], interleaved)
            k_cache[at(cells[n:])] = kb
            v_cache[at(cells[n:])] = v[b].double()
        used = cells[int(leftpad[b]):]
        o, lse = attention(qb, k_cache[at(used)], v_cache[at(used)], scale, causal, window, softcap)
        outs.append(o)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses), k_cache, v_cache


def case(device, dtype, batch=3, sq=1, new=2, cache=40, h=4, hk=2, d=32, rot=16, paged=False, page=8,
         leftpad=False, batch_idx=False):
    g = dict(device=device, dtype=dtype)
    q = torch.randn(batch, sq, h, d, **g)
    rows = batch + 2 if batch_idx else batch
    if paged:
        pool = 3 * batch * cache // page
        k_cache, v_cache = torch.randn(pool, page, hk, d, **g), torch.randn(pool, page, hk, d, **g)
        pages = torch.randperm(pool, device=device)[:batch * (cache // page)].view(batch, cache // page).int()
    else:
        k_cache, v_cache = torch.randn(rows, cache, hk, d, **g), torch.randn(rows, cache, hk, d, **g)
        pages = None
    k = torch.randn(batch, new, hk, d, **g) if new else None
    v = torch.randn(batch, new, hk, d, **g) if new else None
    lengths = torch.randint(0, cache - new + 1, (batch,), device=device).int()
    lengths[0] = cache - new  # one sequence filled to the end
    idx = torch.randperm(rows, device=device)[:batch].int() if batch_idx else None
    pad = (lengths * torch.rand(batch, device=device)).int() if leftpad else None
    cos = sin = None
    if rot:
        angles = torch.rand(cache, rot // 2, device=device) * 6
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v, rotary_cos=cos, rotary_sin=sin,
                cache_seqlens=lengths, cache_batch_idx=idx, cache_leftpad=pad, block_table=pages), page


def check(device, dtype, args, page, causal=True, window=(-1, -1), softcap=0.0, interleaved=True,
          num_splits=0):
    batch = args["q"].shape[0]
    rows = args["cache_batch_idx"] if args["cache_batch_idx"] is not None else torch.arange(batch)
    leftpad = args["cache_leftpad"] if args["cache_leftpad"] is not None else torch.zeros(batch)
    scale = 1 / math.sqrt(args["q"].shape[-1])
    want, want_lse, want_k, want_v = reference(
        args["q"].cpu(), args["k_cache"].cpu(), args["v_cache"].cpu(),
        None if args["k"] is None else args["k"].cpu(), None if args["v"] is None else args["v"].cpu(),
        None if args["rotary_cos"] is None else args["rotary_cos"].cpu(),
        None if args["rotary_sin"] is None else args["rotary_sin"].cpu(),
        args["cache_seqlens"].cpu(), rows.cpu(), leftpad.cpu(),
        None if args["block_table"] is None else args["block_table"].cpu(), page, causal, window, softcap,
        interleaved, scale)
    out, lse = tg.flash_attn_with_kvcache(**args, causal=causal, window_size=window, softcap=softcap,
                                          rotary_interleaved=interleaved, num_splits=num_splits,
                                          return_softmax_lse=True)
    tol = TOL[dtype]
    torch.testing.assert_close(out.cpu().double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.cpu().double(), want_lse, rtol=tol, atol=tol)
    # The append, in place (the new k rotated); the rest of the caches untouched.
    torch.testing.assert_close(args["k_cache"].cpu().double(), want_k, rtol=tol, atol=tol)
    torch.testing.assert_close(args["v_cache"].cpu().double(), want_v, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("interleaved", [True, False])
def test_contiguous_cache_with_append_and_rotary(device, dtype, sq, interleaved):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("CUDA kernels take float16 and bfloat16")
    args, page = case(device, dtype, sq=sq, new=sq)
    check(device, dtype, args, page, interleaved=interleaved)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page", [1, 8, 16])
def test_paged_cache_equals_the_reference(device, page):
    args, page = case(device, torch.bfloat16, sq=3, new=3, cache=48, paged=True, page=page)
    check(device, torch.bfloat16, args, page)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_index_leftpad_window_and_softcap(device):
    args, page = case(device, torch.bfloat16, sq=2, batch_idx=True, leftpad=True)
    check(device, torch.bfloat16, args, page, window=(6, 0), softcap=5.0)


@pytest.mark.parametrize("device", DEVICES)
def test_no_new_keys_and_no_rotary_not_causal(device):
    args, page = case(device, torch.bfloat16, sq=3, new=0, rot=0)
    check(device, torch.bfloat16, args, page, causal=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sq,causal", [(1, True), (4, True), (3, False)])
@pytest.mark.parametrize("splits", [2, 3, 9])
def test_split_kv_equals_the_reference(device, dtype, sq, causal, splits):
    """num_splits > 1: each sequence's keys in parts merged by their maxima and sums, with
    sequences shorter than the parts (empty parts), one with no cached keys, left padding and
    softcap; causal parts before the last hold only keys every query sees."""
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("CUDA kernels take float16 and bfloat16")
    args, page = case(device, dtype, batch=5, sq=sq, new=sq, cache=40, leftpad=True)
    args["cache_seqlens"][1] = 0
    args["cache_seqlens"][2] = 2
    args["cache_leftpad"][1:3] = 0
    check(device, dtype, args, page, causal=causal, softcap=4.0, num_splits=splits)


@pytest.mark.parametrize("device", DEVICES)
def test_split_kv_over_a_paged_cache(device):
    args, page = case(device, torch.bfloat16, sq=2, new=2, cache=48, paged=True, page=8)
    check(device, torch.bfloat16, args, page, num_splits=4)


@pytest.mark.parametrize("device", DEVICES)
def test_split_kv_with_a_learnable_sink_equals_the_unsplit_call(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    args, _ = case(device, dtype, batch=3, sq=4, new=0, rot=0)
    sink = torch.randn(args["q"].shape[2], device=device)
    want = tg.flash_attn_with_kvcache(**args, causal=True, learnable_sink=sink, return_softmax_lse=True)
    got = tg.flash_attn_with_kvcache(**args, causal=True, learnable_sink=sink, num_splits=5,
                                     return_softmax_lse=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("layout", ["contiguous", "pages of 1", "pages of 16", "batch index and leftpad"])
def test_in_place_attention_at_the_kernel_head_dims(device, d, sq, layout):
    """The decode kernel's head dims: four query heads over each KV head packed into one tile,
    the cache read in place (pages of any size), with the append and rotary before it."""
    paged = layout.startswith("pages")
    page = int(layout.split()[-1]) if paged else 8
    args, page = case(device, torch.bfloat16, batch=4, sq=sq, new=sq, cache=96, h=8, hk=2, d=d, paged=paged,
                      page=page, leftpad=layout.startswith("batch"), batch_idx=layout.startswith("batch"))
    check(device, torch.bfloat16, args, page, causal=True, softcap=30.0 if d == 128 else 0.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("splits", [0, 1, 2, 7, 64])
@pytest.mark.parametrize("window", [(-1, -1), (50, 0)])
def test_in_place_split_kv_at_the_kernel_head_dims(device, d, splits, window):
    """Split-KV in the decode kernel: parts of a sequence's key tiles in their own CTAs, merged
    by the combine kernel; parts without keys (64 splits of short sequences), an empty
    sequence, a sliding window; 0 lets the implementation choose."""
    args, page = case(device, torch.float16, batch=3, sq=2, new=2, cache=512, h=4, hk=1, d=d, paged=True,
                      page=64)
    args["cache_seqlens"][1] = 0
    check(device, torch.float16, args, page, causal=True, window=window, num_splits=splits)


@pytest.mark.parametrize("device", DEVICES)
def test_a_sequence_with_no_keys_gives_zeros_and_minus_inf(device):
    args, page = case(device, torch.bfloat16, batch=2, sq=1, new=0, cache=32, h=4, hk=2, d=64, rot=0)
    args["cache_seqlens"] = torch.tensor([0, 5], dtype=torch.int32, device=device)
    out, lse = tg.flash_attn_with_kvcache(**args, return_softmax_lse=True)
    assert (out[0] == 0).all() and (lse[0] == float("-inf")).all()
    assert torch.isfinite(lse[1]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_and_gather_paths_agree(device, monkeypatch):
    """The same call down both paths (float32 on the CPU, where both are the reference's
    arithmetic; bfloat16 kernels on CUDA), the caches restored between them."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    args, page = case(device, dtype, batch=3, sq=3, new=3, cache=64, h=6, hk=2, d=64, paged=True, page=16)
    before = args["k_cache"].clone(), args["v_cache"].clone()
    results = []
    for in_place in (True, False):
        monkeypatch.setattr(kvcache_module, "IN_PLACE", in_place)
        args["k_cache"].copy_(before[0])
        args["v_cache"].copy_(before[1])
        results.append(tg.flash_attn_with_kvcache(**args, causal=True, window_size=(9, 0), softcap=5.0,
                                                  return_softmax_lse=True))
    tol = 0 if device == "cpu" else TOL[dtype]
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_queries_that_need_gradients_get_them():
    """A q (or sink) that requires grad takes the gather path, whose ops keep the graph."""
    args, _ = case("cpu", torch.float32, batch=2, sq=2, new=0, rot=0)
    q = args["q"].requires_grad_()
    sink = torch.randn(args["q"].shape[2], requires_grad=True)
    out = tg.flash_attn_with_kvcache(**args, causal=True, learnable_sink=sink)
    out.square().sum().backward()
    assert q.grad is not None and q.grad.abs().sum() > 0 and sink.grad is not None
    with torch.no_grad():  # no gradient asked: the in-place path, the same values
        again = tg.flash_attn_with_kvcache(**args, causal=True, learnable_sink=sink)
    torch.testing.assert_close(again, out.detach(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("bad, message", [
    (dict(seqlen_k=[9, 99]), "capacity"),
    (dict(block_table=[[0, 1], [2, 50]]), "outside the pool"),
    (dict(seqlen_k=[1, 2, 3]), "cache_seqlens must have shape"),
])
def test_the_cpp_api_checks_the_cache_vectors(bad, message):
    """forward_kvcache itself (tilegrid/attention/kvcache.h), called without the Python layer's
    checks: the vectors' shapes and values are refused with a clear error."""
    q = torch.randn(2, 1, 2, 16)
    pool = torch.randn(4, 8, 1, 16)
    args = dict(seqlen_k=[9, 16], block_table=[[0, 1], [2, 3]])
    args.update(bad)
    seqlen_k = torch.tensor(args["seqlen_k"], dtype=torch.int32)
    table = torch.tensor(args["block_table"], dtype=torch.int32)
    out = torch.empty_like(q)
    with pytest.raises(ValueError, match=message):
        tg._C.flash_attn_kvcache_forward(q, pool, pool, seqlen_k, None, None, table, None, False, -1, -1, 0.0,
                                         1, out, None)


def test_split_bounds_cover_the_keys_and_keep_the_causal_tail_in_the_last_part():
    from tilegrid.split_kv import split_bounds

    counts = torch.tensor([0, 1, 5, 10, 37])
    for splits, sq, causal in ((2, 1, True), (4, 4, True), (3, 2, False), (8, 6, True)):
        bounds = split_bounds(counts, splits, sq, causal)
        assert bounds.shape == (5, splits + 1)
        assert (bounds[:, 0] == 0).all() and torch.equal(bounds[:, -1], counts)
        assert (bounds[:, 1:] >= bounds[:, :-1]).all()
        if causal:
            assert (bounds[:, -2] <= (counts - (sq - 1)).clamp(min=0)).all()


def test_whole_cache_when_cache_seqlens_is_none_and_an_int_for_all():
    q = torch.randn(2, 1, 2, 16)
    k_cache, v_cache = torch.randn(2, 10, 2, 16), torch.randn(2, 10, 2, 16)
    out = tg.flash_attn_with_kvcache(q, k_cache, v_cache)
    want = torch.stack([attention(q[b].double(), k_cache[b].double(), v_cache[b].double(), 0.25, False,
                                  (-1, -1), 0.0)[0] for b in range(2)])
    torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)
    out = tg.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=4)
    want = torch.stack([attention(q[b].double(), k_cache[b, :4].double(), v_cache[b, :4].double(), 0.25,
                                  False, (-1, -1), 0.0)[0] for b in range(2)])
    torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("bad, message", [
    (dict(cache_seqlens=torch.tensor([39, 0, 0], dtype=torch.int32)), "capacity"),
    (dict(block_table=torch.tensor([[0, 1, 99, 2, 3]] * 3, dtype=torch.int32)), "outside the pool"),
    (dict(cache_batch_idx=torch.tensor([0, 1, 7], dtype=torch.int32)), "cache_batch_idx entries"),
    (dict(cache_leftpad=torch.tensor([50, 0, 0], dtype=torch.int32)), "cache_leftpad"),
    (dict(rotary_cos=torch.zeros(40, 20)), "rotary_dim"),
    (dict(rotary_cos=torch.zeros(30, 8)), "positions"),
    (dict(k=None), "together"),
    (dict(alibi_slopes=torch.zeros(4)), "ALiBi"),
])
def test_bad_input_is_refused_before_the_cache_is_written(bad, message):
    args, page = case("cpu", torch.float32)
    if "block_table" in bad:  # a paged pool, one page outside it
        args, page = case("cpu", torch.float32, paged=True, page=8)
        args["cache_seqlens"] = torch.full((3,), 30, dtype=torch.int32)
    args.update(bad)
    if "rotary_cos" in bad:
        args["rotary_sin"] = bad["rotary_cos"]
    before = args["k_cache"].clone(), args["v_cache"].clone()
    with pytest.raises((ValueError, NotImplementedError), match=message):
        tg.flash_attn_with_kvcache(**args, causal=True)
    assert torch.equal(args["k_cache"], before[0]) and torch.equal(args["v_cache"], before[1])
