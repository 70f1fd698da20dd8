"""Flash attention backward on the GPU: tilegrid vs torch SDPA's cuDNN and flash backends and,
when they import, FlashAttention-3 (`flash_attn_interface`) and FlashAttention-4's CuTe-DSL
kernels (`flash_attn.cute`), in FlashAttention-3's setup: 16k tokens per batch
(batch = 16384 / seqlen), hidden 2048 (heads = 2048 / head_dim), bf16.

    python bench/bench_attention_backward.py --out results.json [--head-dims 128]
                                             [--seqlens 512 2048] [--iters 5]

Each system's backward alone is timed: the forward runs once per input set with autograd on,
and every timed call is torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), launch
by launch (CUDA events; no CUDA graph, as FA's own benchmark). FLOPs counted as FlashAttention
counts the backward: 2.5x the forward's 4 * batch * heads * seqlen^2 * head_dim, halved for
causal. The gradients of every system are compared with the first system's in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import tilegrid as tg  # noqa: E402

TOKENS = 16384
HIDDEN = 2048

fa3, FA3_ERROR = harness.optional_import("flash_attn_interface")
fa4, FA4_ERROR = harness.optional_import("flash_attn.cute")


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)
    return run


def first_output(fn):
    """FA3 / FA4 may return (out, lse): the output alone."""
    def run(q, k, v, causal):
        out = fn(q, k, v, causal=causal)
        return out[0] if isinstance(out, tuple) else out
    return run


SYSTEMS = [
    ("tilegrid", lambda q, k, v, causal: tg.flash_attn_func(q, k, v, causal=causal)),
    # deterministic=True: on Hopper the same kernel with its dQ additions in a fixed order;
    # elsewhere the portable tensor-core kernels (no atomics).
    ("tilegrid deterministic", lambda q, k, v, causal: tg.flash_attn_func(
        q, k, v, causal=causal, deterministic=True)),
    ("torch SDPA cuDNN", sdpa(SDPBackend.CUDNN_ATTENTION)),
    ("torch SDPA flash", sdpa(SDPBackend.FLASH_ATTENTION)),
]
if fa3 is not None:
    SYSTEMS.append(("FlashAttention-3", first_output(fa3.flash_attn_func)))
if fa4 is not None:
    SYSTEMS.append(("FlashAttention-4 (CuTe-DSL)", first_output(fa4.flash_attn_func)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--head-dims", type=int, nargs="*", default=[64, 128, 256])
    parser.add_argument("--seqlens", type=int, nargs="*", default=[512, 2048])
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    dtype = torch.bfloat16
    report = harness.Report("attention backward")
    report.checks["FlashAttention-3"] = "measured" if fa3 is not None else f"not measured: {FA3_ERROR}"
    report.checks["FlashAttention-4"] = "measured" if fa4 is not None else f"not measured: {FA4_ERROR}"
    report.measure_ceilings()
    for head_dim in args.head_dims:
        heads = HIDDEN // head_dim
        for seqlen in args.seqlens:
            batch = max(1, TOKENS // seqlen)
            shape = (batch, seqlen, heads, head_dim)
            nbytes = 8 * batch * seqlen * heads * head_dim * dtype.itemsize  # q k v o do dq dk dv
            sets = min(harness.rotation_count(nbytes), 4)
            inputs = [[torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
                       for _ in range(3)] for _ in range(sets)]
            douts = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            for causal in (False, True):
                problem = f"d{head_dim} s{seqlen} b{batch} h{heads} {'causal' if causal else 'full'}"
                flops = 4 * batch * heads * seqlen * seqlen * head_dim * 5 // 2 // (2 if causal else 1)
                timed, first = [], None
                for name, fn in SYSTEMS:
                    try:
                        outs = [fn(*qkv, causal) for qkv in inputs]
                        grads = torch.autograd.grad(outs[0], inputs[0], douts[0], retain_graph=True)
                    except Exception as e:  # a system that cannot run this problem is recorded
                        report.checks[f"{problem} {name}"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
                        continue
                    if first is None:
                        first = (name, grads)
                    else:
                        diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(grads, first[1]))
                        report.checks[f"{problem} {name} grads max_abs_diff vs {first[0]}"] = diff
                    timed.append((name, (lambda outs: lambda i: torch.autograd.grad(
                        outs[i], inputs[i], douts[i], retain_graph=True))(outs)))
                harness.run_each(
                    report, "backward", problem, nbytes, timed, sets, rounds=2, graph=False,
                    iters=args.iters,
                    extra=lambda name, ms, f=flops: {"flops": f, "tflops": f / (ms * 1e-3) / 1e12})
            del inputs, douts
            torch.cuda.empty_cache()
            report.write(args.out)  # after each shape: a run cut short keeps what it measured
    report.write(args.out)
    print(report.table())
    print("TFLOP/s (backward)")
    for r in report.results:
        tf = r.extra.get("tflops")
        print(f"{r.problem:32} {r.system:28} {tf:8.1f}" if tf else f"{r.problem:32} {r.system:28} -")


if __name__ == "__main__":
    main()
