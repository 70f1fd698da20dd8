"""Linear + cross-entropy at a Llama-3 LM head (vocabulary 128256, hidden 4096, T = 8192 tokens,
bf16), forward + backward: tg.linear_cross_entropy against F.cross_entropy(F.linear(...)) in
eager torch and under torch.compile, time (CUDA events, median of --iters) and the peak memory
allocated beyond the inputs.

    python bench/bench_linear_cross_entropy.py --out results.json [--iters 5]
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

T, D, V = 8192, 4096, 128256


def eager(x, w, t):
    return F.cross_entropy(F.linear(x, w).float(), t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    report = harness.Report("linear cross-entropy")
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(V, D, device=dev) / 64).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, V, (T,), device=dev)
    compiled = torch.compile(eager)
    systems = [("tilegrid", lambda: tg.linear_cross_entropy(x, w, t)), ("torch eager", lambda: eager(x, w, t)),
               ("torch.compile", lambda: compiled(x, w, t))]
    flops = 3 * 2 * T * D * V
    ref = None
    for name, fn in systems:
        def step():
            loss = fn()
            gx, gw = torch.autograd.grad(loss, (x, w))
            return loss, gx, gw
        out = step()
        if ref is None and name == "torch eager":
            ref = out
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        ms = harness.time_ms(lambda _: step(), sets=1, warmup=0, iters=args.iters)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        out = step()
        report.add(harness.Result("fwd+bwd", f"T{T} d{D} V{V}", name, ms, flops=flops,
                                  extra={"tflops": flops / (ms * 1e-3) / 1e12, "peak_extra_gib": peak,
                                         "loss": out[0].item()}))
        report.checks[f"{name} outputs"] = out
        print(f"{name:14} {ms:8.2f} ms  {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s  peak extra {peak:6.2f} GiB  loss {out[0].item():.5f}")
    outs = report.checks
    for name in ("tilegrid", "torch.compile"):
        got = outs.pop(f"{name} outputs")
        report.checks[f"{name} vs eager: loss diff, grad rel err"] = [
            abs(got[0].item() - ref[0].item()),
            max(float((a.float() - b.float()).norm() / b.float().norm()) for a, b in zip(got[1:], ref[1:]))]
    outs.pop("torch eager outputs")
    print(report.table())
    report.write(args.out)


if __name__ == "__main__":
    main()
