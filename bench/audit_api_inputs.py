"""Feeds the public API hand-made bad and edge inputs and classifies what each does:

    python bench/audit_api_inputs.py --out bench/results/DATE_cpu_api_audit.json
    python bench/audit_api_inputs.py --device cuda --out bench/results/DATE_GPU_cuda_api_audit.json
    python bench/audit_api_inputs.py --area attention --show unclear_error,silently_wrong

With --device cuda the same cases make their tensors on the GPU (torch's default device in
each case's process), the attention ones in float16, checked at 16-bit tolerances.

Each input runs in a process of its own (forked from this one after `import tilegrid`, so a
case costs milliseconds, not an interpreter), with a time limit (--timeout seconds) and a
memory limit (--memory-gb above what the process holds after the import; on CUDA, whose
context reserves far more address space than it uses, the time limit alone). Outcomes:

- clear_error: an exception of the documented type whose message names the argument (or file);
- unclear_error: any other exception, one that names nothing, or a valid input refused;
- crash: the process died (a signal, or an exit without a result);
- hang: over the time limit, or past the memory limit (runaway work on a small input);
- silently_wrong: a bad input returned a result, or a result failed its check;
- correct: a valid or edge input whose result passed its check (a float64 or torch reference).

Areas: attention (flash_attn_func, varlen, packed, KV cache), cross_entropy (and
linear_cross_entropy), rms_norm, grid (GridBatch construction, JaggedTensor, derived grids),
sparse_conv (ConvolutionPlan), pooling, save_load (.nvdb) and read_mesh (PLY/OFF). The file
readers' own fuzzing is scripts/fuzz.sh's (bench/results/2026-12-05_cpu_reader_fuzz.json).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import faulthandler
import json
import math
import os
import pathlib
import platform
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

import tilegrid as tg

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python" / "attention"))
from attention_reference import reference  # noqa: E402

OUTCOMES = ("clear_error", "unclear_error", "crash", "hang", "silently_wrong", "correct")


@dataclass
class Case:
    area: str
    name: str
    call: Callable[[], object]
    raises: Optional[tuple] = None  # the documented exception types, for a bad input
    names: tuple = ()  # what the message must name (case-insensitive substrings)
    check: Optional[Callable[[object], bool]] = None  # for a valid input: is the result right


CASES: list[Case] = []


def bad(area: str, name: str, call, raises, *names: str) -> None:
    """A bad input: `call` must raise one of `raises` naming each of `names`."""
    CASES.append(Case(area, name, call, raises if isinstance(raises, tuple) else (raises,), names))


def good(area: str, name: str, call, check) -> None:
    """A valid or edge input: `call` must return a result that `check` accepts."""
    CASES.append(Case(area, name, call, check=check))


# What the last failed `close` saw (each case runs in its own process): the report's detail.
LAST_MISMATCH = ""


def close(a, b, atol=1e-5, rtol=1e-5, nan=True) -> bool:
    global LAST_MISMATCH
    a, b = torch.as_tensor(a).detach().double().cpu(), torch.as_tensor(b).detach().double().cpu()
    ok = a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=nan))
    if not ok:
        LAST_MISMATCH = mismatch_summary(a, b)
    return ok


def mismatch_summary(got: torch.Tensor, want: torch.Tensor) -> str:
    """Shapes, then the values (at most 8 of each) or the largest difference."""
    if got.shape != want.shape:
        return f"got shape {list(got.shape)}, want {list(want.shape)}"
    g, w = got.flatten(), want.flatten()
    if g.numel() <= 8:
        return f"got {g.tolist()}, want {w.tolist()}"
    i = int((g - w).abs().nan_to_num(nan=math.inf).argmax())
    return f"largest difference at {i} of {g.numel()}: got {g[i].item()}, want {w[i].item()}"


# The device the cases run on (--device). On CUDA the attention cases take float16, as
# FlashAttention's kernels take 16-bit inputs only, and are checked at 16-bit tolerances; the
# other areas keep their dtypes.
DEVICE = "cpu"


def attention_float() -> torch.dtype:
    return torch.float32 if DEVICE == "cpu" else torch.float16


def tolerance(cpu: float) -> float:
    """An attention check's tolerance: `cpu` for float32 on the CPU, 2e-2 for float16 on CUDA."""
    return cpu if DEVICE == "cpu" else 2e-2


def randn(*shape: int, generator=None, dtype=None) -> torch.Tensor:
    """Random attention inputs on DEVICE, drawn on the CPU (so that a seeded generator gives
    the same values on every device)."""
    x = torch.randn(*shape, generator=generator, device="cpu")
    return x.to(device=DEVICE, dtype=dtype or attention_float())


# ---- attention ------------------------------------------------------------------------------------


def qkv(b=1, sq=8, sk=None, h=2, hk=None, d=16, dv=None, dtype=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    sk, hk, dv = sq if sk is None else sk, h if hk is None else hk, d if dv is None else dv
    return (randn(b, sq, h, d, generator=g, dtype=dtype), randn(b, sk, hk, d, generator=g, dtype=dtype),
            randn(b, sk, hk, dv, generator=g, dtype=dtype))


def attention_matches(q, k, v, tol=None, **kw):
    """A check: flash_attn_func's (out, lse) equals the float64 reference on every batch."""
    scale, causal, window, softcap = (kw.get("softmax_scale"), kw.get("causal", False),
                                      kw.get("window_size", (-1, -1)), kw.get("softcap", 0.0))
    w = tuple(min(x, 2**63 - 1) for x in window)
    tol = tolerance(2e-5) if tol is None else tol

    def check(result):
        out, lse = result
        for b in range(q.shape[0]):
            ref_out, ref_lse = reference(q[b], k[b], v[b], scale, causal, w, softcap)
            if not (close(out[b], ref_out, atol=tol, rtol=tol) and close(lse[b], ref_lse, atol=tolerance(1e-4))):
                return False
        return True
    return check


def dense(q, k, v, **kw):
    return tg.flash_attn_func(q, k, v, return_lse=True, **kw)


def add_attention_cases():
    A = "attention"
    f = tg.flash_attn_func
    t = lambda **kw: qkv(**kw)  # noqa: E731

    bad(A, "q not a tensor", lambda: f([[1.0]], *t()[1:]), TypeError, "q", "list")
    bad(A, "k is None", lambda: f(t()[0], None, t()[2]), TypeError, "k", "NoneType")
    bad(A, "q 3-D", lambda: f(t()[0][0], *t()[1:]), ValueError, "q", "4 dimensions")
    bad(A, "q 0-D", lambda: f(torch.tensor(1.0), *t()[1:]), ValueError, "q")
    bad(A, "float64 inputs", lambda: f(*qkv(dtype=torch.float64)), TypeError, "q", "float64")
    bad(A, "int32 inputs", lambda: f(*[x.int() for x in t()]), TypeError, "q", "int32")
    bad(A, "int16 inputs", lambda: f(*[x.short() for x in t()]), TypeError, "q", "int16")
    bad(A, "complex64 inputs", lambda: f(*[x.to(torch.complex64) for x in t()]), TypeError, "q", "complex")
    other = torch.bfloat16 if attention_float() == torch.float16 else torch.float16
    bad(A, "k of another dtype", lambda: (lambda a, b, c: f(a, b.to(other), c))(*t()), TypeError, "k",
        str(other).removeprefix("torch."))
    bad(A, "q and k head dims differ", lambda: f(t()[0], *qkv(d=8)[1:]), ValueError, "q", "k", "16", "8")
    bad(A, "head dim 257", lambda: f(*qkv(d=257)), ValueError, "head dim", "257")
    bad(A, "head dim 0", lambda: f(*qkv(d=0)), ValueError, "head dim", "0")
    bad(A, "v head dim 300", lambda: f(*qkv(dv=300)), ValueError, "v", "300")
    bad(A, "heads not a multiple", lambda: f(*qkv(h=3, hk=2)), ValueError, "heads", "3", "2")
    bad(A, "k and v seqlens differ", lambda: (lambda a, b, c: f(a, b, c[:, :5]))(*t()), ValueError,
        "k", "v", "[1, 8, 2, 16]", "[1, 5, 2, 16]")
    bad(A, "batches differ", lambda: (lambda a, b, c: f(a, b[:0], c[:0]))(*qkv(b=2)), ValueError, "batch")
    bad(A, "window (-2, 0)", lambda: f(*t(), window_size=(-2, 0)), ValueError, "window", "-2")
    bad(A, "window of floats", lambda: f(*t(), window_size=(1.5, 0)), TypeError, "window_size", "float")
    bad(A, "window of bools", lambda: f(*t(), window_size=(True, 0)), TypeError, "window_size", "bool")
    bad(A, "window a string", lambda: f(*t(), window_size="ab"), (TypeError, ValueError), "window_size", "'ab'")
    bad(A, "window of three", lambda: f(*t(), window_size=(1, 2, 3)), ValueError, "window_size", "pair")
    bad(A, "window an int", lambda: f(*t(), window_size=4), (TypeError, ValueError), "window_size", "pair")
    bad(A, "softcap -1", lambda: f(*t(), softcap=-1.0), ValueError, "softcap", "-1")
    bad(A, "softcap nan", lambda: f(*t(), softcap=math.nan), ValueError, "softcap", "nan")
    bad(A, "softcap inf", lambda: f(*t(), softcap=math.inf), ValueError, "softcap", "inf")
    bad(A, "softcap a string", lambda: f(*t(), softcap="1"), TypeError, "softcap", "str")
    bad(A, "softmax_scale nan", lambda: f(*t(), softmax_scale=math.nan), ValueError, "softmax_scale", "nan")
    bad(A, "softmax_scale 1e39", lambda: f(*t(), softmax_scale=1e39), ValueError, "softmax_scale", "1e+39")
    bad(A, "softmax_scale 1e300", lambda: f(*t(), softmax_scale=1e300), ValueError, "softmax_scale")
    bad(A, "softmax_scale 2**2000", lambda: f(*t(), softmax_scale=2**2000), ValueError, "softmax_scale")
    bad(A, "softmax_scale a list", lambda: f(*t(), softmax_scale=[0.1]), TypeError, "softmax_scale", "list")
    bad(A, "dropout_p 0.1", lambda: f(*t(), 0.1), NotImplementedError, "dropout_p", "0.1")
    bad(A, "dropout_p None", lambda: f(*t(), None), TypeError, "dropout_p", "NoneType")
    bad(A, "softmax_scale passed as dropout_p", lambda: f(*t(), 0.125), NotImplementedError, "dropout_p")
    bad(A, "alibi_slopes given", lambda: f(*t(), alibi_slopes=torch.ones(2)), NotImplementedError, "alibi_slopes")
    good(A, "meta tensors: a meta output of the right shape (shape inference, as torch ops)",
         lambda: f(*[x.to("meta") for x in qkv(dv=8)]), lambda out: out.is_meta and out.shape == (1, 8, 2, 8))

    for label, shape, kw in [
        ("head dim 1", dict(d=1), {}),
        ("head dim 7 (padded)", dict(d=7), {}),
        ("head dim 100 (padded)", dict(d=100), {}),
        ("head dim 256", dict(d=256, sq=3), {}),
        ("v head dim of its own (192/128)", dict(d=192, dv=128, sq=4), {}),
        ("GQA 6 over 2 heads", dict(h=6, hk=2), {}),
        ("MQA", dict(h=4, hk=1), {}),
        ("causal, seqlen_q > seqlen_k (rows without keys)", dict(sq=9, sk=4), {"causal": True}),
        ("causal, seqlen_q < seqlen_k", dict(sq=3, sk=9), {"causal": True}),
        ("window (2, 1)", {}, {"window_size": (2, 1)}),
        ("window (0, 0)", {}, {"window_size": (0, 0)}),
        ("window (2**63 - 1, -1)", {}, {"window_size": (2**63 - 1, -1)}),
        ("window (-1, 2**63 - 1)", {}, {"window_size": (-1, 2**63 - 1)}),
        ("window past int64 (2**64)", {}, {"window_size": (2**64, 2**64)}),
        ("window as a list", {}, {"window_size": [1, 1]}),
        ("softcap 0.5", {}, {"softcap": 0.5}),
        ("softcap 1e30 (no effect)", {}, {"softcap": 1e30}),
        ("softmax_scale 0.0 (uniform)", {}, {"softmax_scale": 0.0}),
        ("softmax_scale -0.5", {}, {"softmax_scale": -0.5}),
        ("softmax_scale 1e30 (hard max)", dict(d=4), {"softmax_scale": 1e30}),
        ("softmax_scale as a numpy float", {}, {"softmax_scale": __import__("numpy").float32(0.3)}),
        ("seqlen_q 0", dict(sq=0, sk=5), {}),
        ("seqlen_k 0 (zeros, lse -inf)", dict(sq=4, sk=0), {}),
        ("batch 0", dict(b=0), {}),
        ("bfloat16", dict(dtype=torch.bfloat16), {}),
        ("float16", dict(dtype=torch.float16), {}),
    ]:
        def make(shape=shape, kw=kw):
            tensors = qkv(**shape)
            return dense(*tensors, **kw), tensors

        tol = 2e-2 if shape.get("dtype") in (torch.bfloat16, torch.float16) else tolerance(2e-5)
        good(A, label, make, lambda r, kw=kw, tol=tol: attention_matches(*r[1], tol=tol, **kw)(r[0]))

    def noncontiguous():
        q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in qkv())
        qs = randn(1, 8, 2, 32)[..., ::2]  # last-dim stride 2
        return dense(qs, k, v), (qs, k, v)
    good(A, "strided q (last-dim stride 2) and transposed k, v", noncontiguous,
         lambda r: attention_matches(*r[1])(r[0]))

    def nan_row():
        q, k, v = qkv()
        q[0, 3, 1, 0] = math.nan
        out, lse = tg.flash_attn_func(q, k, v, return_lse=True)
        return out, lse
    good(A, "NaN in one query: its row NaN, the others finite (as torch's math backend)", nan_row,
         lambda r: bool(r[0][0, 3, 1].isnan().all() and r[1][0, 1, 3].isnan()
                        and r[0].isnan().sum() == r[0].shape[-1]))

    def inf_key():
        q, k, v = qkv()
        k[0, 2, 0, 0] = math.inf
        return tg.flash_attn_func(q, k, v, causal=True), (q, k, v)
    good(A, "+-inf in a key: NaN exactly where a query's score is +inf or NaN (causal; float64 reference)",
         inf_key, lambda r: close(r[0], reference(*(x[0] for x in r[1]), causal=True)[0][None], atol=tolerance(2e-5)))

    def backward():
        q, k, v = (x.requires_grad_() for x in qkv(sq=5, sk=7, h=4, hk=2))
        out = tg.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), softcap=2.0)
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), dout)
        refs = [reference(q[0], k[0], v[0], None, True, (3, 0), 2.0)[0]]
        want = torch.autograd.grad(refs[0][None], (q, k, v), dout.double())
        return got, want
    good(A, "backward (GQA, causal, window, softcap) against float64", backward,
         lambda r: all(close(a, b, atol=tolerance(1e-5), rtol=tolerance(1e-4)) for a, b in zip(*r)))

    # ---- varlen
    fv = tg.flash_attn_varlen_func
    i32 = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    p = lambda n=8, d=16: randn(n, 2, d)  # noqa: E731
    bad(A, "varlen: cu_seqlens_q a list", lambda: fv(p(), p(), p(), [0, 8], i32([0, 8]), 8, 8), TypeError,
        "cu_seqlens_q", "list")
    bad(A, "varlen: cu_seqlens_k a numpy array",
        lambda: fv(p(), p(), p(), i32([0, 8]), __import__("numpy").array([0, 8]), 8, 8), TypeError,
        "cu_seqlens_k", "ndarray")
    bad(A, "varlen: cu_seqlens_q None", lambda: fv(p(), p(), p(), None, i32([0, 8]), 8, 8), TypeError,
        "cu_seqlens_q", "NoneType")
    bad(A, "varlen: cu_seqlens_q int64", lambda: fv(p(), p(), p(), torch.tensor([0, 8]), i32([0, 8]), 8, 8),
        TypeError, "cu_seqlens_q", "int64")
    bad(A, "varlen: cu_seqlens_q float", lambda: fv(p(), p(), p(), torch.tensor([0.0, 8.0]), i32([0, 8]), 8, 8),
        TypeError, "cu_seqlens_q", "float32")
    bad(A, "varlen: cu_seqlens_q decreasing", lambda: fv(p(), p(), p(), i32([0, 5, 3, 8]), i32([0, 2, 4, 8]), 8, 8),
        ValueError, "cu_seqlens_q", "non-decreasing")
    bad(A, "varlen: cu_seqlens_q not ending at total_q", lambda: fv(p(), p(), p(), i32([0, 7]), i32([0, 8]), 8, 8),
        ValueError, "cu_seqlens_q", "7")
    bad(A, "varlen: cu_seqlens_k past total_k", lambda: fv(p(), p(), p(), i32([0, 8]), i32([0, 2**31 - 1]), 8, 8),
        ValueError, "cu_seqlens_k")
    bad(A, "varlen: cu_seqlens_q not starting at 0", lambda: fv(p(), p(), p(), i32([1, 8]), i32([0, 8]), 8, 8),
        ValueError, "cu_seqlens_q[0]")
    bad(A, "varlen: different numbers of sequences", lambda: fv(p(), p(), p(), i32([0, 8]), i32([0, 4, 8]), 8, 8),
        ValueError, "cu_seqlens_q", "cu_seqlens_k")
    bad(A, "varlen: cu_seqlens 2-D", lambda: fv(p(), p(), p(), i32([[0, 8]]), i32([0, 8]), 8, 8), ValueError,
        "cu_seqlens_q", "dimension")
    bad(A, "varlen: cu_seqlens empty", lambda: fv(p(), p(), p(), i32([]), i32([]), 8, 8), ValueError, "cu_seqlens_q")
    bad(A, "varlen: max_seqlen_q too small", lambda: fv(p(), p(), p(), i32([0, 8]), i32([0, 8]), 4, 8), ValueError,
        "max_seqlen_q")
    bad(A, "varlen: max_seqlen_k -1", lambda: fv(p(), p(), p(), i32([0, 8]), i32([0, 8]), 8, -1), ValueError,
        "max_seqlen_k", "-1")
    bad(A, "varlen: max_seqlen_q a float", lambda: fv(p(), p(), p(), i32([0, 8]), i32([0, 8]), 8.0, 8), TypeError,
        "max_seqlen_q", "float")
    bad(A, "varlen: q 4-D", lambda: fv(p()[None], p(), p(), i32([0, 8]), i32([0, 8]), 8, 8), ValueError, "q")
    bad(A, "varlen: block_table with k not a page pool",
        lambda: fv(p(), p(), p(), i32([0, 8]), i32([0, 8]), 8, 8, block_table=torch.zeros(1, 1, dtype=torch.int32)),
        ValueError, "block_table", "page pool", "[8, 2, 16]")

    def varlen(lengths_q, lengths_k, max_q=None, max_k=None, **kw):
        def call():
            cq = torch.tensor([0] + lengths_q).cumsum(0).int()
            ck = torch.tensor([0] + lengths_k).cumsum(0).int()
            q, k, v = p(sum(lengths_q)), p(sum(lengths_k)), p(sum(lengths_k))
            out, lse = fv(q, k, v, cq, ck, max(lengths_q, default=0) if max_q is None else max_q,
                          max(lengths_k, default=0) if max_k is None else max_k, return_lse=True, **kw)
            return out, lse, q, k, v, cq, ck

        def check(r):
            out, lse, q, k, v, cq, ck = r
            for b in range(len(lengths_q)):
                rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
                ref_out, ref_lse = reference(q[rq], k[rk], v[rk], None, kw.get("causal", False),
                                             kw.get("window_size", (-1, -1)))
                if not (close(out[rq], ref_out, atol=tolerance(2e-5))
                        and close(lse[:, rq], ref_lse, atol=tolerance(1e-4))):
                    return False
            return out.shape == q.shape
        return call, check

    for label, args, kw in [
        ("varlen: three sequences of unequal lengths", ([3, 1, 4], [2, 5, 1]), {}),
        ("varlen: empty sequences among others", ([0, 3, 0], [2, 0, 4]), {"causal": True}),
        ("varlen: no sequences (cu_seqlens [0])", ([], []), {}),
        ("varlen: max_seqlen far above the longest (2**40)", ([3, 2], [2, 3], 2**40, 2**40), {}),
        ("varlen: window (1, 0) per sequence", ([4, 5], [4, 5]), {"window_size": (1, 0)}),
    ]:
        good(A, label, *varlen(*args, **kw))

    # ---- packed and KV cache
    bad(A, "qkvpacked: 2 at dim 2 instead of 3", lambda: tg.flash_attn_qkvpacked_func(randn(1, 8, 2, 2, 16)),
        ValueError, "qkv", "3")
    bad(A, "kvpacked: kv a list", lambda: tg.flash_attn_kvpacked_func(randn(1, 8, 2, 16), [1]), TypeError, "kv")
    bad(A, "varlen qkvpacked: cu_seqlens a list",
        lambda: tg.flash_attn_varlen_qkvpacked_func(randn(8, 3, 2, 16), [0, 8], 8), TypeError, "cu_seqlens")

    def packed():
        qkv_ = randn(1, 6, 3, 2, 16)
        return tg.flash_attn_qkvpacked_func(qkv_, causal=True), tg.flash_attn_func(*qkv_.unbind(2), causal=True)
    good(A, "qkvpacked equals the unpacked call", packed, lambda r: torch.equal(r[0], r[1]))

    kc = tg.flash_attn_with_kvcache
    cache = lambda: (randn(2, 8, 2, 16), randn(2, 8, 2, 16))  # noqa: E731
    qd = lambda: randn(2, 1, 2, 16)  # noqa: E731
    bad(A, "kvcache: q a list", lambda: kc([[1.0]], *cache()), TypeError, "q", "list")
    bad(A, "kvcache: cache_seqlens past the capacity", lambda: kc(qd(), *cache(), cache_seqlens=9), ValueError,
        "cache_seqlens")
    bad(A, "kvcache: append past the capacity",
        lambda: kc(qd(), *cache(), k=randn(2, 2, 2, 16), v=randn(2, 2, 2, 16), cache_seqlens=7),
        ValueError, "cache_seqlens", "seqlen_new")
    bad(A, "kvcache: cache_seqlens negative", lambda: kc(qd(), *cache(), cache_seqlens=torch.tensor([-1, 2]).int()),
        ValueError, "cache_seqlens", "-1")
    bad(A, "kvcache: cache_seqlens a list", lambda: kc(qd(), *cache(), cache_seqlens=[1, 2]), TypeError,
        "cache_seqlens", "list")
    bad(A, "kvcache: k without v", lambda: kc(qd(), *cache(), k=randn(2, 1, 2, 16)), ValueError, "k", "v")
    bad(A, "kvcache: block_table pages outside the pool",
        lambda: kc(qd(), randn(4, 4, 2, 16), randn(4, 4, 2, 16), cache_seqlens=3,
                   block_table=torch.tensor([[0], [9]]).int()), ValueError, "block_table", "9")
    bad(A, "kvcache: cache_batch_idx out of range",
        lambda: kc(qd(), *cache(), cache_seqlens=2, cache_batch_idx=torch.tensor([0, 5]).int()), ValueError,
        "cache_batch_idx", "5")
    bad(A, "kvcache: rotary without k", lambda: kc(qd(), *cache(), rotary_cos=torch.ones(8, 4),
                                                   rotary_sin=torch.zeros(8, 4)), ValueError, "rotary")
    bad(A, "kvcache: num_splits -1", lambda: kc(qd(), *cache(), num_splits=-1), ValueError, "num_splits", "-1")

    def kvcache():
        q, (kcache, vcache) = qd(), cache()
        lengths = torch.tensor([3, 8]).int()
        out = kc(q, kcache, vcache, cache_seqlens=lengths)
        refs = [reference(q[b], kcache[b, :n], vcache[b, :n])[0] for b, n in enumerate([3, 8])]
        return out, refs
    good(A, "kvcache: attention over each sequence's cache", kvcache,
         lambda r: all(close(r[0][b], r[1][b], atol=tolerance(2e-5)) for b in range(2)))

    # ---- FP8 (FlashAttention 3's float8_e4m3fn inputs with descale factors)
    e4m3 = lambda **kw: tuple(x.to(torch.float8_e4m3fn) for x in qkv(h=4, hk=2, **kw))  # noqa: E731
    bad(A, "fp8: q_descale of the query heads' shape", lambda: f(*e4m3(), q_descale=torch.ones(1, 4)),
        ValueError, "q_descale", "(1, 2)", "[1, 4]")
    bad(A, "fp8: k_descale float16", lambda: f(*e4m3(), k_descale=torch.ones(1, 2, dtype=torch.float16)),
        TypeError, "k_descale", "float16")
    bad(A, "fp8: v in bfloat16 beside e4m3 q and k",
        lambda: (lambda a, b, c: f(a, b, c.to(torch.bfloat16)))(*e4m3()), TypeError, "v", "bfloat16")
    bad(A, "fp8: descales with bfloat16 inputs", lambda: f(*qkv(dtype=torch.bfloat16), v_descale=torch.ones(1, 2)),
        ValueError, "v_descale", "float8_e4m3fn")

    def fp8():
        q, k, v = e4m3()
        qd, kd, vd = (torch.full((1, 2), s) for s in (0.5, 0.25, 2.0))
        out = f(q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
        return out, reference(q[0].float() * 0.5, k[0].float() * 0.25, v[0].float() * 2.0, causal=True)[0]
    good(A, "fp8: e4m3 inputs with descales (bfloat16 out) against float64 on the dequantised inputs", fp8,
         lambda r: r[0].dtype == torch.bfloat16 and close(r[0][0], r[1], atol=2e-2, rtol=1e-2))


# ---- cross_entropy and linear_cross_entropy ------------------------------------------------------


def add_cross_entropy_cases():
    C = "cross_entropy"
    ce = tg.cross_entropy
    x = lambda n=4, c=5, dtype=torch.float32: torch.randn(n, c).to(dtype)  # noqa: E731
    y = lambda n=4, c=5: torch.randint(0, c, (n,))  # noqa: E731
    bad(C, "input a list", lambda: ce([[1.0, 2.0]], torch.tensor([0])), TypeError, "input", "list")
    bad(C, "target a list", lambda: ce(x(), [0, 1, 2, 3]), TypeError, "target", "list")
    bad(C, "ignore_index 1.5", lambda: ce(x(), y(), ignore_index=1.5), TypeError, "ignore_index", "float")
    bad(C, "ignore_index True", lambda: ce(x(), y(), ignore_index=True), TypeError, "ignore_index", "bool")
    bad(C, "ignore_index 2**70", lambda: ce(x(), y(), ignore_index=2**70), ValueError, "ignore_index")
    bad(C, "reduction 'avg'", lambda: ce(x(), y(), reduction="avg"), ValueError, "reduction", "avg")
    bad(C, "label_smoothing 0.1", lambda: ce(x(), y(), label_smoothing=0.1), NotImplementedError, "label_smoothing")
    bad(C, "class weights", lambda: ce(x(), y(), weight=torch.ones(5)), NotImplementedError, "weight")
    bad(C, "logits 3-D", lambda: ce(torch.randn(2, 5, 3), torch.zeros(2, 3, dtype=torch.long)),
        (ValueError, NotImplementedError), "input", "[2, 5, 3]")
    bad(C, "logits 1-D", lambda: ce(torch.randn(5), torch.tensor(1)), (ValueError, NotImplementedError), "input")
    bad(C, "float targets (class probabilities)", lambda: ce(x(), torch.rand(4, 5)),
        (TypeError, ValueError, NotImplementedError), "target", "float32", "class probabilities")
    bad(C, "target == classes", lambda: ce(x(), torch.tensor([0, 1, 2, 5])), ValueError, "target", "5")
    bad(C, "target -1 (not ignore_index)", lambda: ce(x(), torch.tensor([0, -1, 2, 3])), ValueError, "target", "-1")
    bad(C, "target of another length", lambda: ce(x(), y(n=3)), ValueError, "target")
    bad(C, "int logits", lambda: ce(torch.ones(4, 5, dtype=torch.int32), y()), TypeError, "input", "int32")
    bad(C, "float64 logits", lambda: ce(x(dtype=torch.float64), y()), TypeError, "input", "float64")
    bad(C, "0 classes", lambda: ce(torch.randn(3, 0), torch.zeros(3, dtype=torch.long)), ValueError, "input",
        "class")

    def vs_torch(logits, target, dtype=torch.float64, tol=1e-5, **kw):
        def call():
            lg, tt = logits(), target()
            return ce(lg, tt, **kw), F.cross_entropy(lg.to(dtype), tt, **kw)
        return call, lambda r: close(r[0], r[1], atol=tol, rtol=tol)

    for label, logits, target, kw in [
        ("4 x 5", lambda: torch.randn(4, 5), lambda: torch.tensor([0, 4, 2, 1]), {}),
        ("no rows, mean (NaN as torch)", lambda: torch.randn(0, 5), lambda: torch.zeros(0, dtype=torch.long), {}),
        ("no rows, sum", lambda: torch.randn(0, 5), lambda: torch.zeros(0, dtype=torch.long), {"reduction": "sum"}),
        ("every row ignored, mean (NaN)", lambda: torch.randn(3, 5), lambda: torch.full((3,), -100), {}),
        ("one class", lambda: torch.randn(3, 1), lambda: torch.zeros(3, dtype=torch.long), {}),
        ("ignore_index 7 among others", lambda: torch.randn(4, 9), lambda: torch.tensor([7, 1, 7, 8]),
         {"ignore_index": 7}),
        ("logits of 1e15, equal (log 3)", lambda: torch.full((2, 3), 1e15), lambda: torch.tensor([0, 2]), {}),
        ("logits of 1e17 and 1e17 + ulp", lambda: torch.tensor([[1e17, 1e17, 1.0000001e17]]),
         lambda: torch.tensor([1]), {}),
        ("logits of -1e30 and 1e30", lambda: torch.tensor([[-1e30, 1e30, 0.0]]), lambda: torch.tensor([1]), {}),
        ("logits from -3e38 to 3e38 (loss 6e38 overflows float32: inf)",
         lambda: torch.tensor([[3e38, -3e38]]), lambda: torch.tensor([1]), {}),
        ("a -inf logit elsewhere", lambda: torch.tensor([[-math.inf, 0.0, 1.0]]), lambda: torch.tensor([2]), {}),
        ("a -inf target logit (inf as torch)", lambda: torch.tensor([[-math.inf, 0.0]]), lambda: torch.tensor([0]),
         {"reduction": "none"}),
        ("a NaN logit (NaN as torch)", lambda: torch.tensor([[math.nan, 0.0]]), lambda: torch.tensor([1]), {}),
        ("+inf logit (NaN as torch)", lambda: torch.tensor([[math.inf, 0.0]]), lambda: torch.tensor([1]), {}),
        ("transposed (non-contiguous) logits", lambda: torch.randn(6, 4).t(), lambda: torch.tensor([0, 5, 2, 3]),
         {"reduction": "none"}),
        ("100,000 classes", lambda: torch.randn(2, 100_000), lambda: torch.tensor([5, 99_999]), {}),
    ]:
        good(C, label, *vs_torch(logits, target, dtype=torch.float32 if "3e38" in label else torch.float64, **kw))
    for dtype in (torch.bfloat16, torch.float16):
        good(C, f"{dtype} logits", *vs_torch(lambda d=dtype: torch.randn(4, 7).to(d), lambda: torch.tensor([0, 6, 3, 1]),
                                             dtype=torch.float64, tol=2e-2))

    def gradient():
        lg = torch.randn(5, 6) * 30
        t = torch.tensor([0, 5, -100, 2, 3])
        a, b = lg.clone().requires_grad_(), lg.double().requires_grad_()
        ce(a, t).backward()
        F.cross_entropy(b, t).backward()
        return a.grad, b.grad
    good(C, "gradient against torch (float64)", gradient, lambda r: close(r[0], r[1], atol=1e-6, rtol=1e-5))

    lce = tg.linear_cross_entropy
    h = lambda: torch.randn(4, 8).bfloat16()  # noqa: E731
    w = lambda: torch.randn(16, 8).bfloat16()  # noqa: E731
    bad(C, "linear: weight of another hidden size", lambda: lce(h(), torch.randn(16, 7).bfloat16(), y(c=16)),
        ValueError, "weight", "7")
    bad(C, "linear: float32 (bfloat16 and float16 only)", lambda: lce(h().float(), w().float(), y(c=16)),
        TypeError, "input", "float32")
    bad(C, "linear: input a list", lambda: lce([[1.0]], w(), y(c=16)), TypeError, "input", "list")
    bad(C, "linear: chunk_size 0", lambda: lce(h(), w(), y(c=16), chunk_size=0), ValueError, "chunk_size")
    bad(C, "linear: target past the vocabulary", lambda: lce(h(), w(), torch.tensor([0, 1, 2, 16])), ValueError,
        "target", "16")

    def linear():
        hh, ww, t = h(), w(), torch.tensor([0, 15, 3, -100])
        return lce(hh, ww, t), F.cross_entropy((hh.double() @ ww.double().t()), t)
    good(C, "linear: bfloat16 against torch in float64", linear, lambda r: close(r[0], r[1], atol=2e-2, rtol=1e-2))


# ---- rms_norm ---------------------------------------------------------------------------------------


def add_rms_norm_cases():
    R = "rms_norm"
    rn = tg.rms_norm
    bad(R, "x a list", lambda: rn([[1.0, 2.0]]), TypeError, "x", "list")
    bad(R, "weight a list", lambda: rn(torch.randn(3, 4), [1.0] * 4), TypeError, "weight", "list")
    bad(R, "weight of the wrong size", lambda: rn(torch.randn(3, 4), torch.ones(5)), ValueError, "weight", "5")
    bad(R, "weight 2-D", lambda: rn(torch.randn(3, 4), torch.ones(1, 4)), ValueError, "weight")
    bad(R, "weight float64", lambda: rn(torch.randn(3, 4), torch.ones(4, dtype=torch.float64)), TypeError, "weight",
        "float64")
    bad(R, "x float64", lambda: rn(torch.randn(3, 4, dtype=torch.float64)), TypeError, "x", "float64")
    bad(R, "x int32", lambda: rn(torch.ones(3, 4, dtype=torch.int32)), TypeError, "x", "int32")
    bad(R, "x int16", lambda: rn(torch.ones(3, 4, dtype=torch.int16)), TypeError, "x", "int16")
    bad(R, "x 0-D", lambda: rn(torch.tensor(1.0)), ValueError, "x")
    bad(R, "eps a string", lambda: rn(torch.randn(3, 4), None, "a"), TypeError, "eps", "str")
    bad(R, "eps nan", lambda: rn(torch.randn(3, 4), None, math.nan), ValueError, "eps", "nan")
    bad(R, "eps -1", lambda: rn(torch.randn(3, 4), None, -1.0), ValueError, "eps", "-1")
    bad(R, "weight on the meta device", lambda: rn(torch.randn(3, 4), torch.ones(4, device="meta")),
        ValueError, "weight", "meta")

    def vs_torch(make_x, weight=True, dtype=None, tol=1e-5, eps=None, ref_device=None):
        def call():
            xx = make_x()
            ww = torch.randn(xx.shape[-1]).to(xx.dtype) if weight else None
            got = rn(xx, ww, eps)
            ref_dtype = dtype or torch.float64
            xr, wr = (t if t is None or ref_device is None else t.to(ref_device) for t in (xx, ww))
            want = F.rms_norm(xr.to(ref_dtype), (xx.shape[-1],), None if wr is None else wr.to(ref_dtype),
                              eps if eps is not None else torch.finfo(torch.promote_types(xx.dtype, torch.float32)).eps)
            return got, want.to(got.device)
        return call, lambda r: close(r[0], r[1], atol=tol, rtol=tol)

    float32_on_gpu = None if DEVICE == "cpu" else torch.float32
    for label, make_x, kw in [
        ("3 x 4", lambda: torch.randn(3, 4), {}),
        ("no weight", lambda: torch.randn(3, 4), {"weight": False}),
        ("rows of zeros", lambda: torch.zeros(3, 4), {}),
        ("no rows", lambda: torch.randn(0, 4), {}),
        ("hidden size 0", lambda: torch.randn(3, 0), {}),
        ("hidden size 1", lambda: torch.randn(5, 1), {}),
        ("4-D input", lambda: torch.randn(2, 3, 2, 8), {}),
        ("transposed (last dim strided)", lambda: torch.randn(8, 3).t(), {}),
        # The CPU sums squares in float64; the GPU kernels in float32, as torch's (documented).
        ("values of 1e30 (CPU: 1, as float64; CUDA: 0, as torch's float32, whose squares overflow)",
         lambda: torch.full((2, 4), 1e30), {"dtype": float32_on_gpu}),
        ("values of 1e-30 (CPU: 1, as float64; CUDA: inf, as torch's float32, whose squares underflow)",
         lambda: torch.full((2, 4), 1e-30), {"eps": 0.0, "dtype": float32_on_gpu}),
        ("a NaN in one row (that row NaN)", lambda: torch.tensor([[1.0, math.nan], [1.0, 2.0]]), {}),
        # tg.rms_norm's documented answer on both devices is torch's CPU kernel's (x / inf: 0 for
        # the finite values); torch's CUDA kernel makes the whole row NaN.
        ("an inf in one row (as torch's CPU kernel, on every device)",
         lambda: torch.tensor([[1.0, math.inf], [1.0, 2.0]]), {"dtype": torch.float32, "ref_device": "cpu"}),
        ("hidden size 40,000", lambda: torch.randn(2, 40_000), {}),
        ("bfloat16", lambda: torch.randn(3, 64).bfloat16(), {"tol": 2e-2}),
        ("float16", lambda: torch.randn(3, 64).half(), {"tol": 2e-3}),
        ("eps 0.5", lambda: torch.randn(3, 4), {"eps": 0.5}),
        ("eps 0", lambda: torch.randn(3, 4), {"eps": 0.0}),
    ]:
        good(R, label, *vs_torch(make_x, **kw))

    def backward():
        xx, ww = torch.randn(4, 6, requires_grad=True), torch.randn(6, requires_grad=True)
        dy = torch.randn(4, 6)
        got = torch.autograd.grad(rn(xx, ww, 1e-6), (xx, ww), dy)
        x64, w64 = xx.double(), ww.double()
        want = torch.autograd.grad(F.rms_norm(x64, (6,), w64, 1e-6), (xx, ww), dy.double())
        return got, want
    good(R, "backward against float64", backward, lambda r: all(close(a, b, atol=1e-5) for a, b in zip(*r)))


# ---- grids: GridBatch construction, JaggedTensor, derived grids ---------------------------------


def from_dense(*args, **kwargs):
    """GridBatch.from_dense on DEVICE unless told otherwise (its default, as fVDB's, is the
    CPU, which torch's default device does not change)."""
    kwargs.setdefault("device", DEVICE)
    return tg.GridBatch.from_dense(*args, **kwargs)


def J(*tensors):
    return tg.JaggedTensor(list(tensors))


def ijk(rows, dtype=torch.int32):
    return torch.tensor(rows, dtype=dtype).reshape(-1, 3)


def add_grid_cases():
    G = "grid"
    fi = tg.GridBatch.from_ijk
    one = lambda: J(ijk([[0, 0, 0], [1, 2, 3]]))  # noqa: E731
    bad(G, "from_ijk: a tensor, not a JaggedTensor", lambda: fi(ijk([[0, 0, 0]])), TypeError, "ijk", "JaggedTensor")
    bad(G, "from_ijk: float coordinates", lambda: fi(J(torch.zeros(2, 3))), TypeError, "ijk", "float32")
    bad(G, "from_ijk: int16 coordinates", lambda: fi(J(torch.zeros(2, 3, dtype=torch.int16))), TypeError, "ijk",
        "int16")
    bad(G, "from_ijk: [N, 2]", lambda: fi(J(torch.zeros(2, 2, dtype=torch.int32))), ValueError, "ijk", "[2, 2]")
    bad(G, "from_ijk: int64 past int32", lambda: fi(J(ijk([[0, 2**31, 0]], torch.int64))), ValueError, "ijk",
        "int32")
    for label, sizes, names in [("0", 0, ("voxel_sizes", "0")), ("-1", -1, ("voxel_sizes", "-1")),
                                ("nan", math.nan, ("voxel_sizes", "nan")), ("inf", math.inf, ("voxel_sizes",)),
                                ("[1, 2]", [1, 2], ("voxel_sizes", "[2]")),
                                ("10**400", 10**400, ("voxel_sizes",))]:
        err = TypeError if label == "10**400" else ValueError
        bad(G, f"from_ijk: voxel_sizes {label}", lambda s=sizes: fi(one(), voxel_sizes=s), err, *names)
    bad(G, "from_ijk: voxel_sizes a string", lambda: fi(one(), voxel_sizes="a"), TypeError, "voxel_sizes")
    bad(G, "from_ijk: origins nan", lambda: fi(one(), origins=math.nan), ValueError, "origins", "nan")
    bad(G, "from_ijk: origins [B, 3] for another B", lambda: fi(one(), origins=[[0, 0, 0]] * 2), ValueError,
        "origins")

    def round_trip(rows_per_grid):
        def call():
            return fi(J(*[ijk(r) for r in rows_per_grid])), rows_per_grid

        def check(r):
            grid, rows = r
            got = [sorted(map(tuple, t.tolist())) for t in grid.ijk().unbind()]
            return got == [sorted(set(map(tuple, g))) for g in rows]
        return call, check

    M, m = 2**31 - 1, -(2**31)
    for label, rows in [
        ("from_ijk: duplicates merged", [[[1, 1, 1], [1, 1, 1], [0, 0, 0]]]),
        ("from_ijk: an empty grid among others", [[[0, 0, 0]], [], [[5, 5, 5]]]),
        ("from_ijk: only empty grids", [[], []]),
        ("from_ijk: int32 extremes", [[[M, M, M], [m, m, m], [M, m, 0], [0, 0, 0]]]),
        ("from_ijk: two grids sharing voxels", [[[1, 2, 3]], [[1, 2, 3], [3, 2, 1]]]),
    ]:
        good(G, label, *round_trip(rows))

    def int64_in_range():
        return fi(J(ijk([[2**31 - 1, -5, 0]], torch.int64))).ijk().jdata.tolist()
    good(G, "from_ijk: int64 within int32", int64_in_range, lambda r: r == [[2**31 - 1, -5, 0]])

    fp = tg.GridBatch.from_points
    bad(G, "from_points: a NaN point", lambda: fp(J(torch.tensor([[0.0, math.nan, 0.0]])), 1.0), ValueError,
        "points", "nan")
    bad(G, "from_points: an inf point", lambda: fp(J(torch.tensor([[math.inf, 0.0, 0.0]])), 1.0), ValueError,
        "points", "inf")
    bad(G, "from_points: points [N, 2]", lambda: fp(J(torch.zeros(3, 2)), 1.0), ValueError, "points")
    bad(G, "from_points: int points", lambda: fp(J(torch.zeros(3, 3, dtype=torch.int32)), 1.0), TypeError, "points")
    bad(G, "from_points: points past int32 voxels (1e30)", lambda: fp(J(torch.tensor([[1e30, 0.0, 0.0]])), 1.0),
        ValueError, "points")
    bad(G, "from_points: voxel size 1e-30 (coordinates past int32)",
        lambda: fp(J(torch.tensor([[1.0, 0.0, 0.0]])), 1e-30), ValueError, "int32")
    bad(G, "from_points: voxel_sizes missing", lambda: fp(J(torch.zeros(3, 3)), None), (TypeError, ValueError),
        "voxel_sizes")

    def points():
        pts = torch.tensor([[0.4, 0.4, 0.4], [0.6, 0.0, -0.6], [10.0, 0.0, 0.0]])
        return fp(J(pts), 0.5, origins=[0.0, 0.0, 0.0])
    good(G, "from_points: voxels round((p - origin) / size)", points,
         lambda g: sorted(map(tuple, g.ijk().jdata.tolist())) == [(1, 0, -1), (1, 1, 1), (20, 0, 0)])

    fm = tg.GridBatch.from_mesh
    tri = lambda: J(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]))  # noqa: E731
    bad(G, "from_mesh: a face index past the vertices", lambda: fm(tri(), J(torch.tensor([[0, 1, 3]])), 0.1),
        ValueError, "face", "vertex 3")
    bad(G, "from_mesh: a negative face index", lambda: fm(tri(), J(torch.tensor([[0, 1, -1]])), 0.1), ValueError,
        "face", "vertex -1")
    bad(G, "from_mesh: float faces", lambda: fm(tri(), J(torch.tensor([[0.0, 1.0, 2.0]])), 0.1), TypeError, "faces")
    bad(G, "from_mesh: a NaN vertex", lambda: fm(J(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, math.nan, 0]])),
                                                 J(torch.tensor([[0, 1, 2]])), 0.1), ValueError, "vertices", "nan")
    bad(G, "from_mesh: faces jagged unlike vertices", lambda: fm(tri(), J(torch.tensor([[0, 1, 2]]),
                                                                           torch.tensor([[0, 1, 2]])), 0.1),
        ValueError, "faces")
    good(G, "from_mesh: one triangle at voxel size 0.25", lambda: fm(tri(), J(torch.tensor([[0, 1, 2]])), 0.25),
         lambda g: g.total_voxels > 0 and bool((g.ijk().jdata.min(0).values >= -1).all()))

    fd = from_dense
    bad(G, "from_dense: 0 grids", lambda: fd(0, [2, 2, 2]), ValueError, "num_grids", "0")
    bad(G, "from_dense: 2000^3 voxels", lambda: fd(1, [2000] * 3), ValueError, "8000000000")
    bad(G, "from_dense: a negative extent", lambda: fd(1, [2, -1, 2]), ValueError, "dense_dims")
    bad(G, "from_dense: float extents", lambda: fd(1, [2.0, 2, 2]), TypeError, "dense_dims")
    bad(G, "from_dense: the box past int32", lambda: fd(1, [2, 2, 2], ijk_min=[2**31 - 1, 0, 0]), ValueError,
        "int32")
    good(G, "from_dense: 2 grids of 2 x 3 x 4", lambda: fd(2, [2, 3, 4]), lambda g: g.num_voxels.tolist() == [24, 24])
    good(G, "from_dense: an extent of 0", lambda: fd(1, [2, 0, 2]), lambda g: g.total_voxels == 0)

    JT = tg.JaggedTensor
    bad(G, "JaggedTensor: an empty list", lambda: JT([]), ValueError, "at least one")
    bad(G, "JaggedTensor: shapes that disagree", lambda: JT([torch.zeros(2, 3), torch.zeros(2, 4)]), ValueError,
        "element 1")
    bad(G, "JaggedTensor: a 0-D element", lambda: JT([torch.tensor(1.0)]), ValueError, "element 0")
    bad(G, "JaggedTensor: a list element", lambda: JT([[1, 2, 3]]), (TypeError, ValueError), "element 0")
    bad(G, "JaggedTensor: offsets decreasing", lambda: JT.from_data_and_offsets(torch.zeros(5, 3),
                                                                                 torch.tensor([0, 4, 2, 5])),
        ValueError, "joffsets", "non-decreasing")
    bad(G, "JaggedTensor: offsets a list", lambda: JT.from_data_and_offsets(torch.zeros(5, 3), [0, 5]), TypeError,
        "joffsets", "list")
    bad(G, "JaggedTensor: offsets int32", lambda: JT.from_data_and_offsets(torch.zeros(5, 3),
                                                                            torch.tensor([0, 5]).int()),
        TypeError, "joffsets", "int32")
    bad(G, "JaggedTensor: offsets past the rows", lambda: JT.from_data_and_offsets(torch.zeros(5, 3),
                                                                                    torch.tensor([0, 2**62])),
        ValueError, "joffsets")
    good(G, "JaggedTensor: int16 data", lambda: JT.from_data_and_offsets(torch.zeros(5, 3, dtype=torch.int16),
                                                                          torch.tensor([0, 2, 5])),
         lambda j: [t.shape[0] for t in j.unbind()] == [2, 3])
    bad(G, "jcat: a grid and a JaggedTensor", lambda: tg.jcat([fd(1, [1, 1, 1]), one()]), TypeError, "jcat")

    grid = lambda: fd(1, [3, 3, 3])  # noqa: E731
    bad(G, "conv_grid: kernel_size 0", lambda: grid().conv_grid(0), ValueError, "kernel_size", "0")
    bad(G, "conv_grid: kernel_size 2**70", lambda: grid().conv_grid(2**70), ValueError, "kernel_size")
    bad(G, "conv_grid: kernel_size 2.5", lambda: grid().conv_grid(2.5), TypeError, "kernel_size", "2.5")
    bad(G, "conv_grid: stride 0", lambda: grid().conv_grid(3, 0), ValueError, "stride")
    bad(G, "coarsened_grid: factor 0", lambda: grid().coarsened_grid(0), ValueError, "factor")
    bad(G, "refined_grid: factor 10**5", lambda: grid().refined_grid(10**5), ValueError, "refined_grid")
    bad(G, "dilated_grid: -1", lambda: grid().dilated_grid(-1), ValueError, "n", "-1")
    bad(G, "pruned_grid: a mask of the wrong length", lambda: grid().pruned_grid(torch.ones(5, dtype=torch.bool)),
        ValueError, "mask", "5")
    bad(G, "pruned_grid: a float mask", lambda: grid().pruned_grid(torch.ones(27)), (TypeError, ValueError), "mask",
        "float32")
    bad(G, "ijk_to_index: a tensor", lambda: grid().ijk_to_index(ijk([[0, 0, 0]])), TypeError, "ijk")
    bad(G, "to: the meta device", lambda: grid().to("meta"), ValueError, "meta")
    bad(G, "dilated_grid: 2**20 (2**63 candidate voxels)", lambda: grid().dilated_grid(2**20), ValueError,
        "dilated_grid")
    bad(G, "conv_grid: kernel_size 2**15 (2**45 voxels a voxel)", lambda: grid().conv_grid(2**15), ValueError,
        "conv_grid")
    bad(G, "max_pool: kernel_size 2**20 (the limit is 31)", lambda: grid().max_pool(2**20, torch.ones(27, 1)),
        ValueError, "kernel_size", "31")
    good(G, "ijk_to_index: int64 coordinates past int32 are in no voxel",
         lambda: grid().ijk_to_index(J(ijk([[2**40, 0, 0], [1, 1, 1]], torch.int64))).jdata.tolist(),
         lambda r: r[0] == -1 and r[1] >= 0)
    good(G, "coarsened_grid(2) of 3^3", lambda: grid().coarsened_grid(2).total_voxels, lambda n: n == 8)
    good(G, "dilated_grid(1) of 3^3", lambda: grid().dilated_grid(1).total_voxels, lambda n: n == 125)
    good(G, "pruned_grid: an all-False mask", lambda: grid().pruned_grid(torch.zeros(27, dtype=torch.bool)),
         lambda g: g.total_voxels == 0)


# ---- sparse convolution ------------------------------------------------------------------------------


def conv_reference(plan, x, w):
    """out[o] = sum over taps t of x[map[t, o]] @ W_t, in float64, from the plan's own map."""
    m = plan.kernel_map.long()
    cout, cin = w.shape[:2]
    wt = w.double().reshape(cout, cin, m.shape[0]).permute(2, 1, 0)  # [taps, cin, cout]
    out = torch.zeros(m.shape[1], cout, dtype=torch.float64)
    for t in range(m.shape[0]):
        rows = m[t] >= 0
        out[rows] += x.double()[m[t, rows]] @ wt[t]
    return out


def add_sparse_conv_cases():
    S = "sparse_conv"
    P = tg.ConvolutionPlan.from_grid_batch
    fd = from_dense
    grid = lambda: tg.GridBatch.from_ijk(J(ijk([[0, 0, 0], [1, 0, 0], [1, 1, 0], [3, 3, 3]])))  # noqa: E731
    bad(S, "kernel_size 0", lambda: P(0, 1, grid()), ValueError, "kernel_size", "0")
    bad(S, "kernel_size 2.5", lambda: P(2.5, 1, grid()), TypeError, "kernel_size")
    bad(S, "kernel_size (3, 3)", lambda: P((3, 3), 1, grid()), ValueError, "kernel_size")
    bad(S, "stride -1", lambda: P(3, -1, grid()), ValueError, "stride", "-1")
    bad(S, "source_grid a tensor", lambda: P(3, 1, torch.zeros(4, 3)), TypeError, "source_grid")
    plan = lambda k=3: P(k, 1, grid())  # noqa: E731
    bad(S, "execute: data of another row count", lambda: plan().execute(torch.randn(5, 2), torch.randn(3, 2, 3, 3, 3)),
        ValueError, "data", "5")
    bad(S, "execute: data 1-D", lambda: plan().execute(torch.randn(4), torch.randn(3, 2, 3, 3, 3)), ValueError, "data")
    bad(S, "execute: data a list", lambda: plan().execute([[0.0] * 2] * 4, torch.randn(3, 2, 3, 3, 3)), TypeError,
        "data", "list")
    bad(S, "execute: int data", lambda: plan().execute(torch.ones(4, 2, dtype=torch.int32),
                                                        torch.randn(3, 2, 3, 3, 3)), TypeError, "data", "int32")
    bad(S, "execute: weights of another kernel size", lambda: plan().execute(torch.randn(4, 2),
                                                                              torch.randn(3, 2, 2, 2, 2)),
        ValueError, "weights")
    bad(S, "execute: weights of other input channels", lambda: plan().execute(torch.randn(4, 2),
                                                                               torch.randn(3, 5, 3, 3, 3)),
        ValueError, "weights")
    bad(S, "execute: weights a list", lambda: plan().execute(torch.randn(4, 2), [1.0]), TypeError, "weights", "list")
    bad(S, "execute: jagged data unlike the grid", lambda: plan().execute(
        tg.JaggedTensor([torch.randn(2, 2), torch.randn(2, 2)]), torch.randn(3, 2, 3, 3, 3)), ValueError, "data")
    bad(S, "execute: scale of the wrong size", lambda: plan().execute(torch.randn(4, 2), torch.randn(3, 2, 3, 3, 3),
                                                                       scale=torch.ones(2)), ValueError, "scale")
    bad(S, "execute: residual of the wrong rows", lambda: plan().execute(torch.randn(4, 2), torch.randn(3, 2, 3, 3, 3),
                                                                          residual=torch.ones(2, 3)),
        ValueError, "residual")

    def run(k=3, cin=2, cout=3, dtype=torch.float32, g=None, tol=1e-5, nan=False):
        def call():
            pl = P(k, 1, g() if g else grid())
            x = torch.randn(pl.source_voxels, cin).to(dtype)
            if nan:
                x[0, 0] = math.nan
            w = torch.randn(cout, cin, k, k, k).to(dtype)
            return pl.execute(x, w), conv_reference(pl, x, w)
        return call, lambda r: close(r[0], r[1], atol=tol, rtol=tol)

    for label, kw in [
        ("3x3x3 submanifold", {}),
        ("1x1x1 (a GEMM)", {"k": 1}),
        ("even kernel 2x2x2", {"k": 2}),
        ("float64", {"dtype": torch.float64, "tol": 1e-12}),
        ("bfloat16", {"dtype": torch.bfloat16, "tol": 5e-2}),
        ("0 input channels (zeros)", {"cin": 0}),
        ("0 output channels", {"cout": 0}),
        ("an empty grid", {"g": lambda: fd(1, [0, 0, 0])}),
        ("a NaN input reaches exactly its neighbours", {"nan": True}),
    ]:
        good(S, label, *run(**kw))

    def strided():
        g = fd(1, [4, 4, 4])
        pl = P(2, 2, g)
        x, w = torch.randn(64, 2), torch.randn(3, 2, 2, 2, 2)
        return pl.execute(x, w), conv_reference(pl, x, w), pl.target_grid.total_voxels
    good(S, "stride 2 onto the coarse grid", strided, lambda r: r[2] == 8 and close(r[0], r[1], atol=1e-5))

    def backward():
        pl = plan()
        x, w = torch.randn(4, 2, requires_grad=True), torch.randn(3, 2, 3, 3, 3, requires_grad=True)
        dy = torch.randn(pl.target_grid.total_voxels, 3)
        got = torch.autograd.grad(pl.execute(x, w), (x, w), dy)
        want = torch.autograd.grad(conv_reference(pl, x, w), (x, w), dy.double())
        return got, want
    good(S, "backward against float64", backward, lambda r: all(close(a, b, atol=1e-5) for a, b in zip(*r)))


# ---- pooling ------------------------------------------------------------------------------------------


def add_pooling_cases():
    Q = "pooling"
    grid = lambda: tg.GridBatch.from_ijk(J(ijk([[0, 0, 0], [1, 0, 0], [1, 1, 1], [2, 0, 0], [5, 5, 5]])))  # noqa: E731
    bad(Q, "max_pool: kernel_size 0", lambda: grid().max_pool(0, torch.randn(5, 2)), ValueError, "kernel_size")
    bad(Q, "max_pool: stride -1", lambda: grid().max_pool(2, torch.randn(5, 2), stride=-1), ValueError, "stride")
    bad(Q, "max_pool: data of another row count", lambda: grid().max_pool(2, torch.randn(4, 2)), ValueError,
        "data", "4")
    bad(Q, "max_pool: data a list", lambda: grid().max_pool(2, [[1.0]] * 5), TypeError, "data", "list")
    bad(Q, "avg_pool: jagged data unlike the grid",
        lambda: grid().avg_pool(2, tg.JaggedTensor([torch.randn(2, 2), torch.randn(3, 2)])), ValueError, "data")
    bad(Q, "avg_pool: kernel_size 2.5", lambda: grid().avg_pool(2.5, torch.randn(5, 2)), TypeError, "kernel_size")
    bad(Q, "max_pool: coarse_grid a tensor", lambda: grid().max_pool(2, torch.randn(5, 2), coarse_grid=torch.ones(1)),
        TypeError, "coarse_grid")

    def pooled(reduce, data=None, dtype=torch.float32):
        def call():
            g = grid()
            x = torch.randn(5, 2).to(dtype) if data is None else data()
            out, coarse = (g.max_pool if reduce == "max" else g.avg_pool)(2, x)
            fine = g.ijk().jdata.long()
            want = {}
            for r, c in enumerate(map(tuple, (fine // 2).tolist())):
                want.setdefault(c, []).append(x[r].double())
            rows = {c: r for r, c in enumerate(map(tuple, coarse.ijk().jdata.tolist()))}
            ref = torch.zeros(len(rows), x.shape[1], dtype=torch.float64)
            for c, vals in want.items():
                s = torch.stack(vals)
                ref[rows[c]] = s.max(0).values if reduce == "max" else s.mean(0)
            return out.jdata, ref
        return call, lambda r: close(r[0], r[1], atol=1e-6)

    good(Q, "max_pool 2 against a dictionary of windows", *pooled("max"))
    good(Q, "avg_pool 2 against a dictionary of windows", *pooled("avg"))
    good(Q, "max_pool of float64", *pooled("max", dtype=torch.float64))
    good(Q, "max_pool of int32 features", *pooled("max", data=lambda: torch.arange(10, dtype=torch.int32).view(5, 2)))
    good(Q, "max_pool with a NaN (propagates as torch's max)",
         *pooled("max", data=lambda: torch.tensor([[math.nan, 1.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])))
    good(Q, "max_pool of -inf features", *pooled("max", data=lambda: torch.full((5, 2), -math.inf)))
    good(Q, "max_pool of an empty grid",
         lambda: from_dense(1, [0, 0, 0]).max_pool(2, torch.randn(0, 3))[0].jdata.shape,
         lambda s: tuple(s) == (0, 3))


# ---- save / load (.nvdb) --------------------------------------------------------------------------------


def add_save_load_cases(tmp: pathlib.Path):
    L = "save_load"
    fd = from_dense
    path = lambda name="g.nvdb": tmp / f"{os.getpid()}_{name}"  # noqa: E731
    bad(L, "save: path an int", lambda: tg.save(3, fd(1, [1, 1, 1])), TypeError, "path", "int")
    bad(L, "save: grid a tensor", lambda: tg.save(path(), torch.zeros(3)), TypeError, "grid", "Tensor")
    bad(L, "save: into a missing folder", lambda: tg.save(tmp / "missing" / "g.nvdb", fd(1, [1, 1, 1])),
        (RuntimeError, OSError), "missing")
    bad(L, "save: features of the wrong rows", lambda: tg.save(path(), fd(1, [2, 2, 2]), torch.zeros(7)), ValueError,
        "features", "7")
    bad(L, "save: complex features", lambda: tg.save(path(), fd(1, [1, 1, 1]), torch.zeros(1, dtype=torch.complex64)),
        TypeError, "features", "complex")
    bad(L, "save: int16 features", lambda: tg.save(path(), fd(1, [1, 1, 1]), torch.zeros(1, dtype=torch.int16)),
        TypeError, "features", "int16")
    bad(L, "save: names of the wrong count", lambda: tg.save(path(), fd(2, [1, 1, 1]), names=["a", "b", "c"]),
        ValueError, "names", "3")
    bad(L, "save: a name not a str", lambda: tg.save(path(), fd(1, [1, 1, 1]), names=[5]), TypeError, "names", "int")
    bad(L, "save: a name of 300 bytes (NanoVDB keeps 256)",
        lambda: tg.save(path(), fd(1, [1, 1, 1]), names=["n" * 300]), ValueError, "name", "300")
    bad(L, "save: a name with a NUL", lambda: tg.save(path(), fd(1, [1, 1, 1]), names=["a\0b"]), ValueError, "name")
    bad(L, "load: path an int", lambda: tg.load(5), TypeError, "path", "int")
    bad(L, "load: path a list", lambda: tg.load(["a"]), TypeError, "path", "list")
    bad(L, "load: a missing file", lambda: tg.load(tmp / "missing.nvdb"), RuntimeError, "missing.nvdb")
    bad(L, "load: a folder", lambda: tg.load(tmp), (RuntimeError, ValueError), str(tmp))

    def written(data: bytes, name="bad.nvdb"):
        p = path(name)
        p.write_bytes(data)
        return p
    bad(L, "load: an empty file", lambda: tg.load(written(b"")), ValueError, "bad.nvdb")
    bad(L, "load: a text file", lambda: tg.load(written(b"ply\nformat ascii 1.0\nend_header\n")), ValueError,
        "bad.nvdb")

    def truncated():
        p = path("whole.nvdb")
        tg.save(p, fd(1, [4, 4, 4]), torch.randn(64, 2))
        data = p.read_bytes()
        return tg.load(written(data[: len(data) // 2]))
    bad(L, "load: a file cut in half", truncated, ValueError, "bad.nvdb")
    bad(L, "load: device 'meta'", lambda: (tg.save(path(), fd(1, [1, 1, 1])), tg.load(path(), device="meta")),
        ValueError, "meta")

    def round_trip(make_grid, features, names=None, path_type=str):
        def call():
            g = make_grid()
            f = [x(g) for x in features]
            p = path_type(path())
            tg.save(p, g, f, names)
            return g, f, tg.load(p, device=DEVICE)

        def check(r):
            g, f, (g2, f2, names2) = r
            same_grid = torch.equal(g.ijk().jdata, g2.ijk().jdata) and g.num_voxels.tolist() == g2.num_voxels.tolist()
            same_features = all(torch.equal(a, b.jdata) for a, b in zip(f, f2)) and len(f) == len(f2)
            same_names = names is None or names2 == ([names] * g.num_grids if isinstance(names, str) else names)
            return same_grid and same_features and same_names
        return call, check

    M = 2**31 - 1
    for label, make_grid, features, kw in [
        ("round trip: 2 grids, float32 [N, 3] and bool features", lambda: fd(2, [2, 3, 1]),
         [lambda g: torch.randn(g.total_voxels, 3), lambda g: torch.rand(g.total_voxels) > 0.5], {}),
        ("round trip: names", lambda: fd(2, [1, 1, 1]), [], {"names": ["room", "hall"]}),
        ("round trip: one name for every grid", lambda: fd(3, [1, 1, 1]), [], {"names": "scan"}),
        ("round trip: a non-ASCII name", lambda: fd(1, [1, 1, 1]), [], {"names": ["salle à manger ✓"]}),
        ("round trip: an empty grid", lambda: fd(1, [0, 0, 0]), [lambda g: torch.zeros(0, 4)], {}),
        ("round trip: int32 extremes", lambda: tg.GridBatch.from_ijk(J(ijk([[M, M, M], [-M - 1, 0, 5]]))),
         [lambda g: torch.arange(g.total_voxels, dtype=torch.int64)], {}),
        ("round trip: bfloat16 features [N, 2, 2]", lambda: fd(1, [2, 2, 2]),
         [lambda g: torch.randn(g.total_voxels, 2, 2).bfloat16()], {}),
        ("round trip: a pathlib.Path", lambda: fd(1, [2, 1, 1]), [], {"path_type": pathlib.Path}),
    ]:
        good(L, label, *round_trip(make_grid, features, **kw))


# ---- read_mesh (PLY, OFF) ----------------------------------------------------------------------------------


def add_read_mesh_cases(tmp: pathlib.Path):
    M = "read_mesh"
    E = tg.MeshFormatError

    def file(text, suffix=".off"):
        p = tmp / f"{os.getpid()}_mesh{suffix}"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return p

    off = "OFF\n4 2 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 2 3\n"
    ply = ("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
           "element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    rm = tg.read_mesh
    bad(M, "path an int", lambda: rm(5), TypeError, "read_mesh", "path", "int")
    bad(M, "path None", lambda: rm(None), TypeError, "read_mesh", "path", "NoneType")
    bad(M, "read_ply: path a list", lambda: tg.read_ply(["a.ply"]), TypeError, "read_ply", "path", "list")
    bad(M, "an .obj file", lambda: rm(file("v 0 0 0\n", ".obj")), E, ".obj")
    bad(M, "a missing file", lambda: rm(tmp / "missing.ply"), (OSError, E), "missing.ply")
    bad(M, "a folder named .ply", lambda: rm((lambda d: (d.mkdir(exist_ok=True), d)[1])(tmp / "d.ply")), (OSError, E),
        "d.ply")
    bad(M, "an empty .off", lambda: rm(file("")), E, "mesh.off")
    bad(M, "an empty .ply", lambda: rm(file("", ".ply")), E, "mesh.ply")
    bad(M, "OFF: face of size -1", lambda: rm(file("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n-1 0 1 2\n")), E, "mesh.off")
    bad(M, "OFF: a face index past the vertices", lambda: rm(file("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 3\n")), E,
        "mesh.off")
    bad(M, "OFF: negative counts", lambda: rm(file("OFF\n-3 1 0\n")), E, "mesh.off")
    bad(M, "OFF: 10**12 vertices declared", lambda: rm(file("OFF\n1000000000000 0 0\n0 0 0\n")), E, "mesh.off")
    bad(M, "OFF: a polygon of size 0", lambda: rm(file("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n0\n")), E, "mesh.off")
    bad(M, "OFF: a 10-vertex face given 3", lambda: rm(file("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n10 0 1 2\n")), E,
        "mesh.off")
    bad(M, "OFF: float indices", lambda: rm(file("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1.5 2\n")), E, "mesh.off")
    bad(M, "PLY: 1e9 vertices in a 200-byte file",
        lambda: rm(file(ply.replace("element vertex 3", "element vertex 1000000000"), ".ply")), E, "mesh.ply")
    bad(M, "PLY: a negative count", lambda: rm(file(ply.replace("element vertex 3", "element vertex -3"), ".ply")), E,
        "mesh.ply")
    bad(M, "PLY: a face index past the vertices", lambda: rm(file(ply.replace("3 0 1 2", "3 0 1 7"), ".ply")), E,
        "mesh.ply")
    bad(M, "PLY: no end_header", lambda: rm(file(ply.replace("end_header\n", ""), ".ply")), E, "mesh.ply")
    bad(M, "PLY: bytes that are not UTF-8 in the header", lambda: rm(file(b"ply\nformat ascii 1.0\n\xff\xfe\n", ".ply")),
        E, "mesh.ply")
    bad(M, "PLY: binary declared float, stored double",
        lambda: rm(file(ply.split("end_header\n")[0].replace("ascii", "binary_little_endian")
                        .replace("element face 1\nproperty list uchar int vertex_indices\n", "")
                        + "end_header\n" + "\0" * 8 * 9, ".ply")), E, "mesh.ply")
    good(M, "OFF: two triangles", lambda: rm(file(off)),
         lambda r: r[0].shape == (4, 3) and r[1].tolist() == [[0, 1, 2], [0, 2, 3]])
    good(M, "OFF: a quad fanned into two triangles", lambda: rm(file("OFF\n4 1 0\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3\n")),
         lambda r: r[1].tolist() == [[0, 1, 2], [0, 2, 3]])
    good(M, "OFF: points only (no faces)", lambda: rm(file("OFF\n2 0 0\n0 0 0\n1 1 1\n")),
         lambda r: r[0].shape == (2, 3) and (r[1] is None or r[1].shape[0] == 0))
    good(M, "PLY: ascii triangle", lambda: rm(file(ply, ".ply")), lambda r: r[1].tolist() == [[0, 1, 2]])
    good(M, "PLY: upper-case extension, a pathlib.Path", lambda: rm(file(ply, ".PLY")),
         lambda r: r[0].shape == (3, 3))
    good(M, "PLY: a str path", lambda: rm(str(file(ply, ".ply"))), lambda r: r[0].dtype == torch.float32)


AREAS = ("attention", "cross_entropy", "rms_norm", "grid", "sparse_conv", "pooling", "save_load", "read_mesh")


def build_cases(tmp: pathlib.Path) -> None:
    add_attention_cases()
    add_cross_entropy_cases()
    add_rms_norm_cases()
    add_grid_cases()
    add_sparse_conv_cases()
    add_pooling_cases()
    add_save_load_cases(tmp)
    add_read_mesh_cases(tmp)


# ---- running and classifying ------------------------------------------------------------------------------


SIGNATURE_DUMPS = ("incompatible function arguments", "Expected a value of type", "argument types are supported")


def classify(case: Case) -> dict:
    """Runs in the forked worker."""
    try:
        result = case.call()
    except BaseException as e:  # noqa: BLE001 - every outcome is classified
        text = f"{type(e).__name__}: {e}"
        if isinstance(e, MemoryError) or "can't allocate memory" in str(e):
            return {"outcome": "hang", "detail": f"memory limit: {text}"[:400]}
        if case.raises is None:
            return {"outcome": "unclear_error", "detail": f"valid input refused: {text}"[:400]}
        named = all(n.lower() in str(e).lower() for n in case.names)
        # A binding's or a schema's signature dump names every argument and type: not a message.
        dump = any(m in str(e) for m in SIGNATURE_DUMPS)
        if isinstance(e, case.raises) and named and not dump:
            return {"outcome": "clear_error", "detail": text[:400]}
        why = ("not the documented type" if not isinstance(e, case.raises)
               else "a signature dump" if dump else "does not name " + repr(case.names))
        return {"outcome": "unclear_error", "detail": f"{why}: {text}"[:400]}
    if case.raises is not None:
        return {"outcome": "silently_wrong", "detail": f"returned {type(result).__name__} instead of raising"}
    try:
        ok = bool(case.check(result))
    except BaseException as e:  # noqa: BLE001
        return {"outcome": "silently_wrong", "detail": f"check failed: {type(e).__name__}: {e}"[:400]}
    detail = "" if ok else "result differs from the reference" + (f" ({LAST_MISMATCH})" if LAST_MISMATCH else "")
    return {"outcome": "correct" if ok else "silently_wrong", "detail": detail[:400]}


def address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def run(case: Case, timeout: float, memory_gb: float) -> dict:
    """One case in a forked process with a time and an address-space limit."""
    read_end, write_end = os.pipe()
    err = tempfile.TemporaryFile()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read_end)
        faulthandler.disable()  # a crash is reported here, not dumped into the parent's stderr
        os.dup2(err.fileno(), 2)
        if DEVICE == "cpu":
            limit = address_space() + int(memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        else:  # CUDA reserves far more address space than it uses: the time limit alone
            torch.set_default_device(DEVICE)
        outcome = classify(case)
        os.write(write_end, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_end)
    data, hung = b"", False
    while True:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            hung = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([read_end], [], [], left)
        if ready:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    if hung:
        outcome = {"outcome": "hang", "detail": f"over the time limit of {timeout:g} s"}
    elif data:
        outcome = json.loads(data)
    else:
        err.seek(0)
        tail = err.read()[-300:].decode(errors="replace").strip()
        how = (f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exit code {os.WEXITSTATUS(status)}")
        outcome = {"outcome": "crash", "detail": f"{how}; stderr: {tail}"}
    err.close()
    outcome["seconds"] = round(seconds, 3)
    return outcome


def environment(revision: Optional[str]) -> dict:
    """The run's environment; the revision is that of the checkout the imported tilegrid comes
    from (or `revision`, for a package outside a checkout)."""
    package = pathlib.Path(tg.__file__).parent

    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""
    if revision is None:
        head, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
        revision = (head or "unknown") + (" (with uncommitted changes)" if dirty else "")
    if revision == "unknown":  # an installed package: this script's tree, as bench/harness.py reads it
        from harness import git_revision
        revision = git_revision()
    return {
        "date": datetime.date.today().isoformat(),
        "git_revision": revision,
        "tilegrid": tg.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "device": ("CPU only (the CUDA paths are not exercised)" if DEVICE == "cpu"
                   else f"{torch.cuda.get_device_name(DEVICE)} (cases on {DEVICE}; the attention ones in float16)"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON report here (default: print it)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where the cases' tensors are made (torch's default device in each case's process)")
    parser.add_argument("--area", action="append", choices=AREAS, help="only these areas (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a case (default 30)")
    parser.add_argument("--memory-gb", type=float, default=4.0,
                        help="address space a case may add to the imported interpreter's (default 4)")
    parser.add_argument("--revision", help="the git revision to record (default: the imported package's checkout)")
    parser.add_argument("--compare", help="an earlier report of this script: its counts are kept in this one")
    parser.add_argument("--show", default="unclear_error,crash,hang,silently_wrong",
                        help="outcomes to print case by case (comma-separated)")
    args = parser.parse_args()

    global DEVICE
    DEVICE = args.device
    if DEVICE != "cpu":
        # Each case forks from this process: CUDA must first be used in the children, as a
        # context made here would be unusable in them.
        if torch.cuda.is_initialized():
            sys.exit("audit: CUDA was initialized before the cases were forked; run without it")
        probe = run(Case("probe", "a tensor on the device", lambda: torch.ones(1) + 1,
                         check=lambda r: r.device.type == DEVICE and r.item() == 2.0), args.timeout, args.memory_gb)
        if probe["outcome"] != "correct":
            sys.exit(f"audit: no usable {DEVICE} device in a forked process: {probe['detail']}")

    with tempfile.TemporaryDirectory(prefix="tilegrid-audit-") as tmp:
        build_cases(pathlib.Path(tmp))
        cases = [c for c in CASES if not args.area or c.area in args.area]
        show = set(args.show.split(","))
        results, counts = [], collections.OrderedDict()
        start = time.monotonic()
        for case in cases:
            r = run(case, args.timeout, args.memory_gb)
            results.append({"area": case.area, "case": case.name, **r})
            area = counts.setdefault(case.area, {"inputs": 0, **{o: 0 for o in OUTCOMES}})
            area["inputs"] += 1
            area[r["outcome"]] += 1
            if r["outcome"] in show:
                print(f"{r['outcome']:>14}  {case.area}: {case.name}: {r['detail']}", flush=True)
        elapsed = time.monotonic() - start

    totals = {"inputs": len(results), **{o: sum(a[o] for a in counts.values()) for o in OUTCOMES}}
    report = {
        "benchmark": (f"public API under bad and edge inputs on the {DEVICE.upper()} (issue 43): "
                      "bench/audit_api_inputs.py"),
        "environment": environment(args.revision),
        "limits": {"timeout_s": args.timeout,
                   "memory_gb_above_import": args.memory_gb if DEVICE == "cpu" else "none (CUDA's address space)",
                   "isolation": "each case in a process forked after `import tilegrid`"},
        "outcome_meaning": {
            "clear_error": "an exception of the documented type whose message names the argument (or file)",
            "unclear_error": "another exception type, a message that names nothing, or a valid input refused",
            "crash": "the process died (signal, or exit without a result)",
            "hang": "over the time limit or past the memory limit",
            "silently_wrong": "a bad input returned a result, or a result failed its check against a reference",
            "correct": "a valid or edge input whose result passed its check (float64 or torch reference)",
        },
        "per_area": counts,
        "total": totals,
        "seconds": round(elapsed, 1),
        "command": " ".join(["python", "bench/audit_api_inputs.py", *sys.argv[1:]]),
        "cases": results,
    }
    if args.compare:
        old = json.loads(pathlib.Path(args.compare).read_text())
        report["compared_with"] = {
            "git_revision": old["environment"]["git_revision"], "command": old["command"],
            "per_area": old["per_area"],
            "total": old["total"],
            "changed": [f"{o['area']}: {o['case']}: {o['outcome']} -> {n['outcome']}"
                        for o, n in zip(old["cases"], results) if o["case"] == n["case"]
                        and o["outcome"] != n["outcome"]],
        }
    text = json.dumps(report, indent=1, ensure_ascii=False)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    else:
        print(text)
    print(f"audit: {totals} in {elapsed:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
