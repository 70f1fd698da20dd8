"""GEMM on the GPU: tilegrid's Hopper kernels vs torch.matmul (cuBLAS) on the products of a
Llama-3-8B layer with 8192 tokens, forward (y = x w^T), data gradient (dx = dy w) and weight
gradient (dw = dy^T x), with cuBLAS's 8192^3 rate and the copy bandwidth measured in the same
run.

    python bench/bench_gemm.py --out results.json [--dtype float16]

On a compute capability 9.0 GPU, tilegrid is measured three ways: its automatic choice and
each sm90 schedule forced (cooperative 128x256, ping-pong 128x128), so that the choice can be
checked against the data. Elsewhere tilegrid would run its untuned portable kernel, which is
not worth timing here; only cuBLAS is measured then.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import tilegrid as tg  # noqa: E402
from tilegrid import _C  # noqa: E402
from tilegrid._torch import current_stream  # noqa: E402

TOKENS = 8192
# (name, in_features, out_features) of the Llama-3-8B projections: QKV (32 query heads and 8
# key/value heads of 128), the attention output, gate and up fused, down.
LAYERS = [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096)]


def problems(tokens: int):
    """(op, label, M, N, K, make_operands(dtype) -> (a, b)) for the three products of each
    layer, out[M, N] = a[M, K] b[K, N], in the layouts a linear layer has (a transposed view
    where it has one)."""
    out = []
    for name, fin, fout in LAYERS:

        def fprop(d, fin=fin, fout=fout):  # y = x w^T
            return randn(tokens, fin, d), randn(fout, fin, d).t()

        def dgrad(d, fin=fin, fout=fout):  # dx = dy w
            return randn(tokens, fout, d), randn(fout, fin, d)

        def wgrad(d, fin=fin, fout=fout):  # dw = dy^T x
            return randn(tokens, fout, d).t(), randn(tokens, fin, d)

        for op, m, n, k, make in [("fprop", tokens, fout, fin, fprop),
                                  ("dgrad", tokens, fin, fout, dgrad),
                                  ("wgrad", fout, fin, tokens, wgrad)]:
            out.append((op, f"{name} M{m} N{n} K{k}", m, n, k, make))
    return out


def randn(rows, cols, dtype):
    return torch.randn(rows, cols, device="cuda", dtype=dtype)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--tokens", type=int, default=TOKENS)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    hopper = torch.cuda.get_device_capability() == (9, 0)

    report = harness.Report("gemm")
    report.measure_ceilings()
    kernels = [("tilegrid", "auto"), ("tilegrid sm90 cooperative", "sm90_cooperative"),
               ("tilegrid sm90 ping-pong", "sm90_pingpong")] if hopper else []
    if not hopper:
        report.checks["tilegrid"] = (
            "not measured: no compute capability 9.0 GPU (portable kernel only)")

    for op, label, m, n, k, make in problems(args.tokens):
        problem = f"{label} {args.dtype}"
        nbytes = (m * k + k * n + m * n) * dtype.itemsize
        sets = harness.rotation_count(nbytes)
        operands = [make(dtype) for _ in range(sets)]
        outs = [torch.empty(m, n, device="cuda", dtype=dtype) for _ in range(sets)]
        stream = current_stream(outs[0])

        # Correctness in the same run: relative Frobenius error against float32 torch (tf32 off)
        # on the first input set, for every system.
        a0, b0 = operands[0]
        ref = a0.float() @ b0.float()

        def rel_err(got):
            return ((got.float() - ref).norm() / ref.norm()).item()

        report.checks[f"{problem} cuBLAS rel_err"] = rel_err(a0 @ b0)
        for name, kernel in kernels:
            try:
                _C.matmul(a0, b0, outs[0], stream, kernel)
                err = rel_err(outs[0])
            except Exception as e:  # recorded, not fatal
                err = f"failed: {type(e).__name__}: {e}"
            report.checks[f"{problem} {name} rel_err"] = err
        if hopper:
            report.checks[f"{problem} tilegrid kernel"] = tg.describe_matmul(a0, b0)
        del ref

        def ours(kernel):
            # The stream is looked up on every call: graph capture runs on a stream of its own.
            return lambda i: _C.matmul(*operands[i], outs[i], current_stream(outs[i]), kernel)

        systems = [(name, ours(kernel)) for name, kernel in kernels]
        systems.append(("torch.matmul (cuBLAS)", lambda i: torch.matmul(*operands[i], out=outs[i])))
        first = len(report.results)
        harness.run_each(report, op, problem, nbytes, systems, sets)
        for r in report.results[first:]:
            r.flops = 2 * m * n * k
            if r.median_ms:
                r.extra["tflops"] = r.flops / (r.median_ms * 1e-3) / 1e12
        del operands, outs
        torch.cuda.empty_cache()

    report.write(args.out)
    print(report.table())
    print(tflops_table(report))


def tflops_table(report: harness.Report) -> str:
    """TFLOP/s of each system, its fraction of the 8192^3 cuBLAS ceiling, and the ratio to
    cuBLAS on the same problem (the issue's target: >= 0.95)."""
    ceiling = report.ceilings.get("bf16_gemm_tflops")
    lines = [f"{'op':6} {'problem':34} {'system':28} {'TFLOP/s':>8} {'%ceil':>6} {'vs cuBLAS':>9}"]
    cublas = {(r.op, r.problem): r.median_ms
              for r in report.results if r.system.startswith("torch")}
    for r in report.results:
        if not r.median_ms:
            lines.append(f"{r.op:6} {r.problem:34} {r.system:28} {'-':>8}  ({r.note})")
            continue
        tf = r.extra["tflops"]
        ref = cublas.get((r.op, r.problem))
        ratio = f"{ref / r.median_ms:.3f}" if ref else "-"
        frac = f"{100 * tf / ceiling:.1f}" if ceiling else "-"
        lines.append(f"{r.op:6} {r.problem:34} {r.system:28} {tf:8.1f} {frac:>6} {ratio:>9}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
