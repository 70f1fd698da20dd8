"""RMSNorm on the GPU: tilegrid vs torch eager, torch.compile of the plain torch code, and
Liger-Kernel (when installed), forward and forward+backward, with the copy ceiling measured
in the same run.

    python bench/bench_rms_norm.py --out results.json

Bytes counted (the minimum each pass must move): forward reads x and writes y; forward +
backward also reads x and dy and writes dx (the weight and the per-row rstd are < 0.1%).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import tilegrid as tg  # noqa: E402

SHAPES = [(32768, 4096), (16384, 8192), (32768, 4097)]
EPS = 1e-6


def rms_norm_plain(x, w, eps: float = EPS):
    """The usual model code (Llama's RMSNorm), which torch.compile fuses into one Triton kernel."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def systems(report: harness.Report):
    compiled = torch.compile(rms_norm_plain)
    found = [
        ("tilegrid", lambda x, w: tg.rms_norm(x, w, EPS)),
        ("torch eager (F.rms_norm)", lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)),
        ("torch.compile (plain code)", compiled),
    ]
    liger, error = harness.optional_import("liger_kernel.ops.rms_norm")
    if liger is not None:
        found.append(("Liger-Kernel", lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS)))
    else:
        report.checks["liger_kernel"] = f"not measured: {error}"
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)

    report = harness.Report("rms_norm")
    report.measure_ceilings()
    candidates = systems(report)

    for rows, hidden in SHAPES:
        problem = f"[{rows}, {hidden}] {args.dtype}"
        elem = rows * hidden * dtype.itemsize
        sets = harness.rotation_count(2 * elem)
        xs = [torch.randn(rows, hidden, device="cuda", dtype=dtype) for _ in range(sets)]
        dys = [torch.randn_like(x) for x in xs]
        w = (1 + 0.1 * torch.randn(hidden, device="cuda")).to(dtype)
        wg = w.clone().requires_grad_()
        xgs = [x.clone().requires_grad_() for x in xs]

        # Correctness in the same run, against float64 torch on the first input set.
        y_ref = F.rms_norm(xs[0].double(), (hidden,), w.double(), EPS)
        for name, fn in candidates:
            try:
                err = ((fn(xs[0], w).double() - y_ref).norm() / y_ref.norm()).item()
            except Exception as e:  # recorded, not fatal
                err = f"failed: {type(e).__name__}: {e}"
            report.checks[f"{problem} {name} forward rel_err"] = err

        with torch.no_grad():
            harness.run_each(
                report, "forward", problem, 2 * elem,
                [(name, (lambda fn: lambda i: fn(xs[i], w))(fn)) for name, fn in candidates], sets,
            )
        harness.run_each(
            report, "forward+backward", problem, 5 * elem,
            [(name, (lambda fn: lambda i: torch.autograd.grad(fn(xgs[i], wg), (xgs[i], wg), dys[i]))(fn))
             for name, fn in candidates],
            sets,
        )
        del xs, dys, xgs
        torch.cuda.empty_cache()

    report.write(args.out)
    print(report.table())


if __name__ == "__main__":
    main()
