"""Property tests of the public API on the CPU (hypothesis): random shapes, dtypes, windows,
softcaps, scales and offsets for attention against the float64 reference; random jagged
offsets; random grids from ijk; cross-entropy on logits up to 1e37 against torch in float64.
Every drawn input either matches the reference or raises the documented error type with a
message that names the argument.

Deterministic: derandomize=True makes hypothesis draw the same examples on every run, and the
tensors are drawn from a torch.Generator seeded by hypothesis, so that CI sees one fixed set
of 440 examples (about 10 s in all). To explore further on a machine of your own, raise
TILEGRID_PROPERTY_EXAMPLES (a multiplier of each test's max_examples) and set
TILEGRID_PROPERTY_RANDOM=1 for fresh draws."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tilegrid as tg  # noqa: E402
from attention.attention_reference import reference  # noqa: E402

_SCALE = int(os.environ.get("TILEGRID_PROPERTY_EXAMPLES", "1"))
_RANDOM = os.environ.get("TILEGRID_PROPERTY_RANDOM") == "1"


def examples(n: int):
    """hypothesis settings for n examples: derandomized, no deadline (the first call of an op
    pays for its set-up), no example database written into the checkout."""
    return settings(max_examples=n * _SCALE, derandomize=not _RANDOM, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def randn(gen: torch.Generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


# Output tolerance: the CPU backend forms scores and probabilities in float32, sums in float64
# and rounds the output once to the dtype (eps / 2 relative): in float32 the absolute error
# reaches ~1.5e-6 at head dim 256 (2e-5 is the attention tests' float32 tolerance).
RTOL = {torch.float32: 1e-5, torch.float16: torch.finfo(torch.float16).eps,
        torch.bfloat16: torch.finfo(torch.bfloat16).eps}
ATOL = {torch.float32: 2e-5, torch.float16: 1e-5, torch.bfloat16: 1e-5}
DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
# Head dims on and between the kernels' (64, 96, 128, 192, 256): the padded ones included.
HEAD_DIMS = st.sampled_from([1, 7, 16, 40, 64, 96, 100, 130, 256])
WINDOW_SIDE = st.integers(-1, 12) | st.just(2**63 - 1)
SCALES = st.none() | st.floats(-3.0, 3.0, allow_nan=False)
SOFTCAPS = st.just(0.0) | st.floats(0.5, 60.0)


def assert_matches_reference(out, lse, ref_out, ref_lse, dtype):
    torch.testing.assert_close(out.double(), ref_out, rtol=RTOL[dtype], atol=ATOL[dtype])
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


# ---- attention: random shapes, dtypes and options against the float64 reference ---------------


@examples(60)
@given(seed=st.integers(0, 2**32 - 1), dtype=DTYPES, batch=st.integers(1, 2),
       seqlen_q=st.integers(0, 9), seqlen_k=st.integers(0, 9), heads_k=st.integers(1, 2),
       group=st.integers(1, 3), head_dim=HEAD_DIMS, v_dim=st.none() | HEAD_DIMS,
       causal=st.booleans(), window=st.tuples(WINDOW_SIDE, WINDOW_SIDE), scale=SCALES,
       softcap=SOFTCAPS)
def test_flash_attn_func_matches_the_float64_reference(seed, dtype, batch, seqlen_q, seqlen_k,
                                                       heads_k, group, head_dim, v_dim, causal,
                                                       window, scale, softcap):
    gen = torch.Generator().manual_seed(seed)
    q = randn(gen, batch, seqlen_q, heads_k * group, head_dim, dtype=dtype)
    k = randn(gen, batch, seqlen_k, heads_k, head_dim, dtype=dtype)
    v = randn(gen, batch, seqlen_k, heads_k, v_dim or head_dim, dtype=dtype)
    grads = dtype == torch.float32
    for t in (q, k, v):
        t.requires_grad_(grads)
    out, lse = tg.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, window_size=window,
                                  softcap=softcap, return_lse=True)
    assert out.shape == (*q.shape[:3], v.shape[-1]) and out.dtype == dtype
    ref = [reference(q[b], k[b], v[b], scale, causal, window, softcap) for b in range(batch)]
    ref_out = torch.stack([o for o, _ in ref])
    ref_lse = torch.stack([s for _, s in ref])
    assert_matches_reference(out, lse, ref_out, ref_lse, dtype)
    if grads:
        dout = randn(gen, *out.shape)
        got = torch.autograd.grad(out, (q, k, v), dout)
        want = torch.autograd.grad(ref_out, (q, k, v), dout.double())
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@examples(40)
@given(seed=st.integers(0, 2**32 - 1), dtype=DTYPES,
       lengths=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), min_size=0, max_size=4),
       extra=st.tuples(st.integers(0, 3), st.integers(0, 3)), heads_k=st.integers(1, 2),
       group=st.integers(1, 2), head_dim=HEAD_DIMS, causal=st.booleans(),
       window=st.tuples(WINDOW_SIDE, WINDOW_SIDE), scale=SCALES, softcap=SOFTCAPS)
def test_flash_attn_varlen_func_matches_the_reference_sequence_by_sequence(
        seed, dtype, lengths, extra, heads_k, group, head_dim, causal, window, scale, softcap):
    gen = torch.Generator().manual_seed(seed)
    len_q = [a for a, _ in lengths]
    len_k = [b for _, b in lengths]
    cu_q = torch.tensor([0] + len_q, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + len_k, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q = randn(gen, sum(len_q), heads_k * group, head_dim, dtype=dtype)
    k = randn(gen, sum(len_k), heads_k, head_dim, dtype=dtype)
    v = randn(gen, sum(len_k), heads_k, head_dim, dtype=dtype)
    # max_seqlen may exceed the longest sequence (FlashAttention takes an upper bound).
    max_q, max_k = max(len_q, default=0) + extra[0], max(len_k, default=0) + extra[1]
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=scale,
                                         causal=causal, window_size=window, softcap=softcap,
                                         return_lse=True)
    assert out.shape == q.shape and lse.shape == (q.shape[1], q.shape[0])
    for b in range(len(lengths)):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref_out, ref_lse = reference(q[rq], k[rk], v[rk], scale, causal, window, softcap)
        assert_matches_reference(out[rq], lse[:, rq], ref_out, ref_lse, dtype)


# ---- attention: bad arguments raise the documented type, naming the argument ------------------


def _expect(error, pattern, fn, *args, **kwargs):
    with pytest.raises(error, match=pattern):
        fn(*args, **kwargs)


@examples(40)
@given(data=st.data())
def test_bad_attention_arguments_raise_the_documented_error_naming_them(data):
    q = torch.randn(1, 6, 2, 16)
    kind = data.draw(st.sampled_from([
        "window_below_minus_one", "window_not_int", "softcap_negative", "scale_not_finite",
        "head_dim_past_256", "head_dims_differ", "dropout", "window_not_a_pair"]))
    op, attn = "flash_attn_func", tg.flash_attn_func
    if kind == "window_below_minus_one":
        w = (data.draw(st.integers(max_value=-2)), data.draw(st.integers(-1, 5)))
        _expect(ValueError, f"{op}: window sizes must be >= -1", attn, q, q, q, window_size=w)
    elif kind == "window_not_int":
        w = (data.draw(st.floats(allow_nan=False) | st.text(max_size=3)), 0)
        _expect(TypeError, f"{op}: window_size must be an integer", attn, q, q, q, window_size=w)
    elif kind == "window_not_a_pair":
        w = data.draw(st.integers() | st.lists(st.integers(-1, 4)).filter(lambda x: len(x) != 2))
        _expect(ValueError, f"{op}: window_size must be a pair", attn, q, q, q, window_size=w)
    elif kind == "softcap_negative":
        cap = data.draw(st.floats(max_value=-(2.0**-100), allow_infinity=False, width=32))
        _expect(ValueError, f"{op}: softcap must be >= 0", attn, q, q, q, softcap=cap)
    elif kind == "scale_not_finite":
        s = data.draw(st.sampled_from([math.nan, math.inf, -math.inf])
                      | st.floats(min_value=3.5e38, allow_infinity=False)
                      | st.integers(min_value=2**129))
        _expect(ValueError, f"{op}: softmax_scale must be finite in float32", tg.flash_attn_func,
                q, q, q, softmax_scale=s)
    elif kind == "head_dim_past_256":
        d = data.draw(st.integers(257, 600))
        big = torch.randn(1, 2, 1, d)
        _expect(ValueError, f"{op}: head dimensions must be at most 256, got q's and k's {d}",
                attn, big, big, big)
    elif kind == "head_dims_differ":
        dq, dk = data.draw(st.lists(st.integers(1, 64), min_size=2, max_size=2, unique=True))
        q, k = torch.randn(1, 3, 1, dq), torch.randn(1, 3, 1, dk)
        _expect(ValueError, rf"q and k must have the same head dimension, got q's {dq} .* k's {dk}",
                attn, q, k, k)
    else:
        p = data.draw(st.floats(1e-6, 1.0))
        _expect(NotImplementedError, "dropout_p must be 0.0", attn, q, q, q, p)


@examples(40)
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4), data=st.data())
def test_bad_varlen_offsets_raise_the_documented_error_naming_them(lengths, data):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    total = cu[-1]
    q = torch.randn(total, 2, 16)
    good = torch.tensor(cu, dtype=torch.int32)
    which = data.draw(st.sampled_from(["cu_seqlens_q", "cu_seqlens_k"]))
    kind = data.draw(st.sampled_from(["not_a_tensor", "int64", "start", "end", "decreasing", "2d",
                                      "max_seqlen_short"]))

    def call(bad, max_seqlen=max(lengths)):
        args = (bad, good) if which == "cu_seqlens_q" else (good, bad)
        return tg.flash_attn_varlen_func(q, q, q, *args, max_seqlen, max_seqlen)

    if kind == "not_a_tensor":
        bad = data.draw(st.sampled_from([list, tuple]))(cu)
        _expect(TypeError, f"{which} must be an int32 torch.Tensor", call, bad)
    elif kind == "int64":
        _expect(TypeError, f"{which} must be int32, got int64", call, good.long())
    elif kind == "start":
        first = data.draw(st.integers(1, 2**31 - 1))
        bad = good.clone()
        bad[0] = first
        _expect(ValueError, rf"{which}(\[0\] must be 0| must be non-decreasing)", call, bad)
    elif kind == "end":
        end = data.draw(st.integers(0, 2**31 - 1).filter(lambda e: e != total and e >= cu[-2]))
        bad = good.clone()
        bad[-1] = end
        _expect(ValueError, rf"{which}\[-1\] must equal the number of tokens \({total}\)", call, bad)
    elif kind == "decreasing":
        i = data.draw(st.integers(1, len(cu) - 1))
        bad = good.clone()
        bad[i] = -data.draw(st.integers(1, 2**31))
        _expect(ValueError, f"{which} must be non-decreasing", call, bad)
    elif kind == "2d":
        _expect(ValueError, f"{which} must have 1 dimension", call, good[None])
    else:
        longest = max(lengths)
        if longest == 0:
            return call(good, 0)  # no token anywhere: max_seqlen 0 is exact
        _expect(ValueError, rf"over max_seqlen_q = {longest - 1}", call, good, longest - 1)


# ---- JaggedTensor: random offsets, valid or not ---------------------------------------------------


@examples(60)
@given(sizes=st.lists(st.integers(0, 6), min_size=0, max_size=6), width=st.integers(1, 3))
def test_valid_jagged_offsets_unbind_to_their_rows_and_index_them(sizes, width):
    offsets = torch.tensor([0] + sizes, dtype=torch.int64).cumsum(0)
    rows = int(offsets[-1])
    jdata = torch.arange(rows * width, dtype=torch.float32).reshape(rows, width)
    j = tg.JaggedTensor.from_data_and_offsets(jdata, offsets)
    assert j.num_tensors == len(sizes)
    parts = j.unbind()
    assert [p.shape[0] for p in parts] == sizes
    assert torch.equal(torch.cat(parts) if parts else jdata, jdata)
    tensor_of_row = torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes, dtype=torch.int64))
    assert torch.equal(j.jidx, tensor_of_row.int())


@examples(60)
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5), data=st.data())
def test_invalid_jagged_offsets_raise_the_documented_error_naming_joffsets(sizes, data):
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    rows = offsets[-1]
    jdata = torch.zeros(rows, 3)
    kind = data.draw(st.sampled_from(["start", "end", "decreasing", "int32", "2d", "empty", "list"]))
    bad = torch.tensor(offsets)
    error, pattern = ValueError, "JaggedTensor: joffsets"
    if kind == "start":
        bad[0] = data.draw(st.integers(1, 2**62))
    elif kind == "end":
        bad[-1] = data.draw(st.integers(offsets[-2], 2**62).filter(lambda e: e != rows))
    elif kind == "decreasing":
        bad[data.draw(st.integers(1, len(offsets) - 1))] = -data.draw(st.integers(1, 2**62))
    elif kind == "int32":
        bad, error = bad.int(), TypeError
    elif kind == "2d":
        bad = bad[None]
    elif kind == "empty":
        bad = bad[:0]
    else:
        bad, error = offsets, TypeError
        pattern = "JaggedTensor.from_data_and_offsets: joffsets must be a torch.Tensor"
    with pytest.raises(error, match=pattern):
        tg.JaggedTensor.from_data_and_offsets(jdata, bad)


# ---- GridBatch.from_ijk: any coordinates of int32, duplicates and empty grids ------------------

I32 = st.integers(-2**31, 2**31 - 1)
# Coordinates from a small box (many duplicates and neighbours in one leaf) or anywhere in int32
# (the tree's extremes: voxels at +-2**31 share no node with the origin's).
COORD = st.integers(-3, 3) | I32


@examples(50)
@given(grids=st.lists(st.lists(st.tuples(COORD, COORD, COORD), max_size=12), min_size=1, max_size=3),
       dtype=st.sampled_from([torch.int32, torch.int64]),
       probes=st.lists(st.tuples(COORD, COORD, COORD), max_size=6))
def test_grids_from_any_int32_coordinates_hold_each_voxel_once_and_find_it(grids, dtype, probes):
    def jagged(lists, dtype):
        return tg.JaggedTensor([torch.tensor(c, dtype=dtype).reshape(-1, 3) for c in lists])

    grid = tg.GridBatch.from_ijk(jagged(grids, dtype))
    assert grid.num_grids == len(grids)
    assert grid.num_voxels.tolist() == [len(set(g)) for g in grids]
    voxels = [[tuple(v) for v in t.tolist()] for t in grid.ijk().unbind()]
    assert [sorted(v) for v in voxels] == [sorted(set(g)) for g in grids]
    # Each grid's voxels, and the probes, looked up in every grid: a voxel is found at its own
    # row of the grid that holds it, anything else at -1.
    queries = [list(g) + list(probes) for g in grids]
    rows = grid.ijk_to_index(jagged(queries, torch.int32)).unbind()
    for b in range(len(grids)):
        for query, row in zip(queries[b], rows[b].tolist()):
            assert (voxels[b][row] == query) if query in voxels[b] else row == -1


@examples(30)
@given(data=st.data())
def test_bad_grid_inputs_raise_the_documented_error_naming_them(data):
    op, ijk = "GridBatch.from_ijk", tg.JaggedTensor([torch.zeros(2, 3, dtype=torch.int32)])
    kind = data.draw(st.sampled_from(["outside_int32", "float_ijk", "not_three", "voxel_size",
                                      "origin", "not_jagged"]))
    if kind == "outside_int32":
        c = data.draw(st.integers(2**31, 2**63 - 1) | st.integers(-2**63, -2**31 - 1))
        bad = tg.JaggedTensor([torch.tensor([[0, c, 0]])])
        _expect(ValueError, f"{op}: ijk holds coordinates outside the int32", tg.GridBatch.from_ijk, bad)
    elif kind == "float_ijk":
        dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.int16, torch.uint8]))
        bad = tg.JaggedTensor([torch.zeros(2, 3, dtype=dtype)])
        _expect(TypeError, f"{op}: ijk must be int32", tg.GridBatch.from_ijk, bad)
    elif kind == "not_three":
        width = data.draw(st.integers(0, 6).filter(lambda w: w != 3))
        bad = tg.JaggedTensor([torch.zeros(2, width, dtype=torch.int32)])
        _expect(ValueError, rf"{op}: ijk must be \[N, 3\]", tg.GridBatch.from_ijk, bad)
    elif kind == "voxel_size":
        s = data.draw(st.floats(max_value=0.0) | st.sampled_from([math.nan, math.inf]))
        _expect(ValueError, f"{op}: voxel_sizes must be", tg.GridBatch.from_ijk, ijk, voxel_sizes=s)
    elif kind == "origin":
        o = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        _expect(ValueError, f"{op}: origins must be finite", tg.GridBatch.from_ijk, ijk, origins=o)
    else:
        bad = data.draw(st.sampled_from([torch.zeros(2, 3, dtype=torch.int32), [[0, 0, 0]], None]))
        _expect(TypeError, f"{op}: ijk must be a JaggedTensor", tg.GridBatch.from_ijk, bad)


# ---- cross_entropy: logits up to 1e37, against torch in float64 -------------------------------


@examples(60)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 6), classes=st.integers(1, 40),
       exponent=st.integers(-3, 37), base=st.sampled_from([0.0]) | st.integers(0, 37),
       negative=st.booleans(), reduction=st.sampled_from(["mean", "sum", "none"]),
       ignore=st.booleans())
def test_cross_entropy_on_extreme_logits_matches_torch_in_float64(seed, rows, classes, exponent, base,
                                                                   negative, reduction, ignore):
    """float32 logits spread by 10**exponent around a common value of +-10**base (the issue's
    case: logits near 1e15 whose float32 values are equal or an ulp apart): the loss and the
    gradient against F.cross_entropy in float64 on the same float32 logits."""
    gen = torch.Generator().manual_seed(seed)
    centre = (-1 if negative else 1) * (10.0 ** base if base else 0.0)
    logits = (centre + randn(gen, rows, classes, dtype=torch.float64) * 10.0 ** exponent).float()
    target = torch.randint(0, classes, (rows,), generator=gen)
    if ignore:
        target[torch.rand(rows, generator=gen) < 0.3] = -100
    x = logits.clone().requires_grad_(True)
    loss = tg.cross_entropy(x, target, reduction=reduction)
    x64 = logits.double().requires_grad_(True)
    want = F.cross_entropy(x64, target, reduction=reduction)
    # The loss is formed from float32 differences x - max(x), each within 2**-24 of its size.
    spread = float((logits.double() - logits.double().amax(1, keepdim=True)).abs().max())
    atol = 2e-6 * (1 + spread) * rows
    torch.testing.assert_close(loss.double(), want.detach(), rtol=1e-5, atol=atol, equal_nan=True)
    if reduction != "none" and bool(torch.isfinite(want)):
        loss.backward()
        want.backward()
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-6)
