"""Configurations of the Hopper attention backward side by side (src/attention/sm90/
flash_bwd_sm90_config.h): each built by bench/attention_variants.sh as a shared library
(bench/cuda/attention_backward_variant.cu, bf16), loaded here with ctypes and timed against the
shipped configuration ("default") in FlashAttention-3's setup: 16k tokens a batch
(batch = 16384 / seqlen), hidden 2048 (heads = 2048 / head_dim), bf16, causal and not.

    python bench/bench_attention_backward_variants.py LIBDIR [--head-dims 64 128 256]
                                                      [--seqlens 2048 16384] [--out FILE.json]
                                                      [--deterministic]

--deterministic also times every variant with deterministic=True ("<name> det"), beside the
default runs of the same problem.

Correctness, per variant, before any timing counts:
  - FlashAttention's criterion (tests/python/attention/test_flash_attn_backward.py): on a small
    problem with tile tails (2 x 1037 tokens, 2 heads) every gradient's error against float64
    autograd is at most twice a plain bf16 torch implementation's plus a floor; the outputs are
    poisoned (NaN) first; deterministic=True must repeat bit for bit and meet it too.
  - at every timed problem, the same criterion on two heads of the first sequence against
    float32 autograd (the bf16 plain reference beside it).
  - a kDqAtomic 2 variant's deterministic gradients of the small problem against those of
    "default" and "atomic", bit for bit (printed, not a criterion: bitwise equality with
    "atomic" is expected, bits_against).
FlashAttention-3 (`flash_attn_interface`, when it imports) is timed beside them on every problem
(its backward through autograd on a retained graph: its preprocess, main and postprocess
kernels) and checked with the same criterion.
Timing: the three kernels of one backward call (preprocess, main, postprocess) with buffers
allocated once, CUDA events around batches of back-to-back calls, the variants interleaved batch
by batch so that clock drift hits all alike; the median batch. TFLOP/s as FlashAttention counts
the backward: 2.5 x 4 x batch x heads x seqlen^2 x head_dim, halved for causal. The forward
that makes out and lse is float32 torch.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python", "attention"))
from attention_reference import reference  # noqa: E402

FA3_ERROR = ""  # why FlashAttention-3 did not import
try:
    import flash_attn_interface as fa3
except ImportError as e:
    fa3, FA3_ERROR = None, f"{type(e).__name__}: {e}"

TOKENS = 16384
HIDDEN = 2048


def load_variant(path: str) -> tuple[str, ctypes.CDLL]:
    """A variant library hd<d>-<name>.so: (name, the library). Every variant defines the same
    symbols (the baseline: the very same kernels); each library binds its own."""
    name = os.path.basename(path)[: -len(".so")].split("-", 1)[1]
    return name, ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_DEEPBIND)


def variants_of(libdir: str, head_dim: int, make) -> list:
    """make(path) of each library of the head dim in libdir, "default" first; empty (and said)
    without a default."""
    variants = [make(p) for p in sorted(glob.glob(os.path.join(libdir, f"hd{head_dim}-*.so")))]
    variants.sort(key=lambda v: (v.name != "default", v.name))
    if not variants or variants[0].name != "default":
        print(f"hd{head_dim}: no default variant in {libdir}; skipped")
        return []
    for v in variants:
        print(f"hd{head_dim} {v.name}: {v.describe()}", flush=True)
    return variants


def print_table(rows) -> None:
    """The markdown table of (head dim, tokens, causal, variant, TFLOP/s, ms, speed-up, ok)."""
    print("\n| head dim | tokens | mask | variant | TFLOP/s | ms | vs default | correct |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for d, s, causal, name, tflops, t, speedup, good in rows:
        print(f"| {d} | {s} | {'causal' if causal else 'full'} | {name} | {tflops:.0f} | "
              f"{t:.3f} | {speedup:.3f} | {'ok' if good else 'WRONG'} |")


class Variant:
    """One configuration's shared library: hd<d>-<name>.so."""

    def __init__(self, path: str):
        self.name, self.lib = load_variant(path)
        info = (ctypes.c_int * 7)()
        self.lib.tg_variant_describe(info)
        (self.head_dim, self.block_m, self.block_n, self.stages, self.fast_exp2, self.dq_atomic,
         self.smem) = list(info)
        self.lib.tg_variant_workspace.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p]
        fn = self.lib.tg_variant_backward
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ctypes.c_void_p] * 13 + [ctypes.c_int] * 4 + [ctypes.c_float,
                                                                      ctypes.c_void_p]

    # The config's kDqAtomic (src/attention/sm90/flash_bwd_sm90_config.h): 1 float2 atomics in
    # row order, 2 float4 atomics in fragment order.
    DQ_PATHS = {0: "smem+bulk", 1: "atomics", 2: "atomics v4 fragment order"}

    def describe(self) -> str:
        return (f"{self.block_m}x{self.block_n} {self.stages} stage(s), exp2 "
                f"{'ftz' if self.fast_exp2 else 'exp2f'}, dQ "
                f"{self.DQ_PATHS.get(self.dq_atomic, f'kDqAtomic {self.dq_atomic}')}, "
                f"smem {self.smem // 1024} KB")

    def prepare(self, q, k, v, out, dout, lse, causal, deterministic=False):
        """A callable that runs the backward into buffers allocated here; returns it and the
        (dq, dk, dv) it writes."""
        b, s, h, d = q.shape
        n = (ctypes.c_int64 * 3)()
        self.lib.tg_variant_workspace(b, s, h, ctypes.cast(n, ctypes.c_void_p))
        f32 = dict(dtype=torch.float32, device=q.device)
        lse_log2, delta = torch.empty(n[0], **f32), torch.empty(n[0], **f32)
        dq_accum = torch.empty(n[1], **f32)
        order = torch.empty(n[2], dtype=torch.int32, device=q.device) if deterministic else None
        grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
        args = [t.data_ptr() for t in (q, k, v, out, dout, lse, *grads, lse_log2, delta,
                                       dq_accum)]
        args += [order.data_ptr() if order is not None else None, b, s, h, int(causal),
                 1.0 / math.sqrt(d)]
        keep = (lse_log2, delta, dq_accum, order)

        def run():
            err = self.lib.tg_variant_backward(*args, torch.cuda.current_stream().cuda_stream)
            if err:
                raise RuntimeError(f"{self.name}: {err.decode()}")
            return keep

        return run, grads


def prepare_fa3(q, k, v, dout, causal):
    """FlashAttention-3's backward of its own forward, as Variant.prepare returns it."""
    leaves = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fa3.flash_attn_func(*leaves, causal=causal)
    out = out[0] if isinstance(out, tuple) else out
    grads = [None, None, None]

    def run():
        grads[:] = torch.autograd.grad(out, leaves, dout, retain_graph=True)
        return out

    return run, grads


def forward_float32(q, k, v, causal):
    """out (bf16) and lse (float32, natural log, [b, h, s]) in float32 arithmetic, a few heads
    at a time."""
    b, s, h, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, dtype=torch.float32, device=q.device)
    chunk = max(1, (1 << 30) // (s * s))  # heads whose s x s float32 scores fit in 4 GiB
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1) if causal else None
    for bi in range(b):
        for h0 in range(0, h, chunk):
            hs = slice(h0, min(h, h0 + chunk))
            qf, kf, vf = (t[bi, :, hs].transpose(0, 1).float() for t in (q, k, v))
            scores = (qf @ kf.transpose(1, 2)) / math.sqrt(d)
            if mask is not None:
                scores.masked_fill_(mask, float("-inf"))
            row_lse = torch.logsumexp(scores, dim=-1)
            p = torch.exp(scores - row_lse[..., None])
            out[bi, :, hs] = (p @ vf).transpose(0, 1).to(q.dtype)
            lse[bi, hs] = row_lse
            del scores, p
    return out, lse


def reference_grads(q, k, v, dout, causal, dtype):
    """Gradients of sum(out * dout) for each sequence of q [b, s, h, d], in `dtype`."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out = torch.stack([reference(q[b], k[b], v[b], causal=causal, dtype=dtype)[0]
                       for b in range(q.shape[0])])
    out.backward(dout.to(dtype))
    return q.grad, k.grad, v.grad


def criterion(got, plain, exact):
    """FlashAttention's test of a kernel, |got - exact| <= 2 |plain - exact| + floor, on each of
    dq, dk, dv: (all pass, the largest error, the plain error beside it)."""
    ok, err, plain_err = True, 0.0, 0.0
    for g, p, e in zip(got, plain, exact):
        e = e.double()
        g_err = math.inf if g.isnan().any() else (g.double() - e).abs().max().item()
        p_err = (p.double() - e).abs().max().item()
        ok = ok and g_err <= 2 * p_err + 1e-3 * e.abs().max().item() + 1e-6
        if g_err >= err:
            err, plain_err = g_err, p_err
    return ok, err, plain_err


def check_small(variant, causal):
    """The criterion against float64 on 2 x 1037 tokens, 2 heads, with and without
    deterministic=True (which must also repeat bit for bit): (ok, error, plain error, note,
    the deterministic (dq, dk, dv))."""
    torch.manual_seed(1037 + variant.head_dim)
    shape = (2, 1037, 2, variant.head_dim)
    q, k, v, dout = (torch.randn(shape, device="cuda").to(torch.bfloat16) for _ in range(4))
    out, lse = forward_float32(q, k, v, causal)
    exact = reference_grads(q, k, v, dout, causal, torch.float64)
    plain = reference_grads(q, k, v, dout, causal, torch.bfloat16)
    ok, err, plain_err, note = True, 0.0, 0.0, ""
    for deterministic in (False, True):
        run, grads = variant.prepare(q, k, v, out, dout, lse, causal, deterministic)
        run()
        if deterministic:
            first = [g.clone() for g in grads]
            run()
            if not all(torch.equal(a, b) for a, b in zip(first, grads)):
                ok, note = False, "deterministic=True differs between runs"
        good, e, p = criterion(grads, plain, exact)
        ok = ok and good
        if e >= err:
            err, plain_err = e, p
    return ok, err, plain_err, note, grads


def bits_against(grads, other):
    """Which of dq, dk, dv are bit for bit those of `other` (the same inputs), else the largest
    difference. Informational, not a criterion: under deterministic=True every dQ path adds the
    same float32 values into each sum in the same order (the key tiles take turns), so
    kDqAtomic 2 should match kDqAtomic 1 (the same red.global.add arithmetic) bit for bit, and
    the default's bulk additions unless they round subnormal sums differently."""
    return ", ".join(f"{n} " + ("same bits" if torch.equal(a, b) else
                                f"differs by {(a.double() - b.double()).abs().max().item():.1e}")
                     for n, a, b in zip(("dq", "dk", "dv"), grads, other))


def time_interleaved(runs, batches=12, per_batch=5, warmup=2):
    """Median milliseconds a call of each callable, batches interleaved."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = [[] for _ in runs]
    for b in range(warmup + batches):
        for i, run in enumerate(runs):
            start.record()
            for _ in range(per_batch):
                run()
            end.record()
            end.synchronize()
            if b >= warmup:
                ms[i].append(start.elapsed_time(end) / per_batch)
    return [sorted(m)[len(m) // 2] for m in ms]


def parse_args() -> argparse.Namespace:
    """The variant benchmarks' arguments; prints the device and whether FA3 is measured."""
    parser = argparse.ArgumentParser()
    parser.add_argument("libdir")
    parser.add_argument("--head-dims", type=int, nargs="*", default=[64, 128, 256])
    parser.add_argument("--seqlens", type=int, nargs="*", default=[2048, 16384])
    parser.add_argument("--out")
    parser.add_argument("--deterministic", action="store_true",
                        help="also time each variant with deterministic=True")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name()}", flush=True)
    print("FlashAttention-3: " + ("measured" if fa3 else f"not measured ({FA3_ERROR})"),
          flush=True)
    return args


def main() -> None:
    args = parse_args()
    rows, record = [], []

    def write():  # after every problem: a run cut short keeps what it measured
        if args.out:
            with open(args.out, "w") as f:
                json.dump(dict(device=torch.cuda.get_device_name(), rows=record), f, indent=1)

    for d in args.head_dims:
        variants = variants_of(args.libdir, d, Variant)
        if not variants:
            continue
        ok = {}
        for causal in (False, True):
            deterministic = {}  # the deterministic gradients of the variants so far, by name
            for v in variants:
                good, err, plain_err, why, grads = check_small(v, causal)
                ok[v.name] = ok.get(v.name, True) and good
                print(f"hd{d} {v.name} causal={causal}: small-problem criterion "
                      f"{'ok' if good else 'FAILED'} (error {err:.2e}, plain bf16 "
                      f"{plain_err:.2e}) {why}", flush=True)
                # kDqAtomic 2 against 1 and the default (same inputs, deterministic=True).
                if v.dq_atomic == 2 and v.fast_exp2:
                    for other in ("default", "atomic"):
                        if other in deterministic:
                            print(f"hd{d} {v.name} causal={causal}: deterministic gradients "
                                  f"against {other}'s: {bits_against(grads, deterministic[other])}",
                                  flush=True)
                deterministic[v.name] = grads
        for seqlen in args.seqlens:
            batch, heads = TOKENS // seqlen, HIDDEN // d
            for causal in (False, True):
                torch.manual_seed(seqlen + d)
                shape = (batch, seqlen, heads, d)
                q, k, v_, dout = (torch.randn(shape, device="cuda").to(torch.bfloat16)
                                  for _ in range(4))
                out, lse = forward_float32(q, k, v_, causal)
                one = (slice(0, 1), slice(None), slice(0, 2))  # first sequence, two heads
                exact = reference_grads(q[one], k[one], v_[one], dout[one], causal,
                                        torch.float32)
                plain = reference_grads(q[one], k[one], v_[one], dout[one], causal,
                                        torch.bfloat16)
                runs, verdicts, names, configs = [], [], [], []
                for v in variants:
                    for det in (False, True) if args.deterministic else (False,):
                        run, grads = v.prepare(q, k, v_, out, dout, lse, causal, deterministic=det)
                        run()
                        good, err, _ = criterion([g[one] for g in grads], plain, exact)
                        verdicts.append(good and ok[v.name])
                        runs.append(run)
                        names.append(f"{v.name} det" if det else v.name)
                        configs.append(v.describe() + (", deterministic" if det else ""))
                if fa3 is not None:
                    run, grads = prepare_fa3(q, k, v_, dout, causal)
                    run()
                    verdicts.append(criterion([g[one] for g in grads], plain, exact)[0])
                    runs.append(run)
                    names.append("FlashAttention-3")
                    configs.append("flash_attn_interface, its own forward")
                ms = time_interleaved(runs)
                flops = 2.5 * 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
                for name, config, t, good in zip(names, configs, ms, verdicts):
                    tflops = flops / t / 1e9
                    rows.append((d, seqlen, causal, name, tflops, t, ms[0] / t, good))
                    record.append(dict(head_dim=d, seqlen=seqlen, causal=causal, variant=name,
                                       config=config, ms=t, tflops=tflops,
                                       speedup=ms[0] / t, correct=good))
                    print(f"hd{d} {seqlen} {'causal' if causal else 'full'} {name}: "
                          f"{t:.3f} ms {tflops:.0f} TFLOP/s x{ms[0] / t:.3f} "
                          f"{'ok' if good else 'WRONG'}", flush=True)
                del q, k, v_, dout, out, lse, runs
                torch.cuda.empty_cache()
                write()
    print_table(rows)


if __name__ == "__main__":
    main()
