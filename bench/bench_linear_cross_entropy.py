"""Linear + cross-entropy at a Llama-3 LM head (vocabulary 128256, hidden 4096, T = 8192 tokens,
bf16), forward + backward: tg.linear_cross_entropy (its default chunk size and the sizes of
--chunks) against F.cross_entropy(F.linear(...)) in eager torch and under torch.compile, and,
when they import, Liger-Kernel's and quack's fused linear cross-entropy. Time (CUDA events,
median of --iters), the peak memory allocated beyond the inputs, and that peak less the two
gradients themselves (2 bytes x (T + V) x d, which every system returns). The three products
alone (cuBLAS, bf16 out) are timed as the floor.

    python bench/bench_linear_cross_entropy.py --out results.json [--iters 5] [--chunks 1024 4096]
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


def peers(report):
    """(name, fn(x, w, t)) of the reference systems that import here; the rest are recorded."""
    found = []
    liger, error = harness.optional_import("liger_kernel.ops.fused_linear_cross_entropy")
    if liger is not None:
        def run_liger(x, w, t):  # 0.8.5 returns (loss, z_loss, token accuracy, ...)
            out = liger.LigerFusedLinearCrossEntropyFunction.apply(x, w, t)
            return out[0] if isinstance(out, tuple) else out
        found.append(("Liger-Kernel", run_liger))
    else:
        report.checks["Liger-Kernel"] = f"not measured: {error}"
    quack, error = harness.optional_import("quack.linear_cross_entropy")
    if quack is not None:
        found.append(("quack", lambda x, w, t: quack.chunked_linear_cross_entropy(x, w, t)))
    else:
        report.checks["quack"] = f"not measured: {error}"
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--chunks", type=int, nargs="*", default=[1024, 4096, 8192],
                        help="tilegrid chunk sizes measured besides the default")
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
    systems += [(f"tilegrid chunk {c}", (lambda c: lambda: tg.linear_cross_entropy(x, w, t, chunk_size=c))(c))
                for c in args.chunks]
    systems += [(name, (lambda fn: lambda: fn(x, w, t))(fn)) for name, fn in peers(report)]
    flops = 3 * 2 * T * D * V
    gradient_gib = 2 * (T + V) * D / 2**30

    # The floor: the three products alone on cuBLAS (logits, d x, d W), bf16 outputs.
    logits = torch.empty(T, V, device=dev, dtype=torch.bfloat16)
    xd, wd = x.detach(), w.detach()
    def products():
        torch.mm(xd, wd.t(), out=logits)
        torch.mm(logits, wd)
        torch.mm(logits.t(), xd)
    ms = harness.time_ms(lambda _: products(), sets=1, warmup=2, iters=args.iters)
    report.add(harness.Result("fwd+bwd", f"T{T} d{D} V{V}", "cuBLAS: the 3 products alone", ms, flops=flops,
                              extra={"tflops": flops / (ms * 1e-3) / 1e12}))
    print(f"{'3 products':14} {ms:8.2f} ms  {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s")
    del logits
    torch.cuda.empty_cache()
    ref = None
    for name, fn in systems:
        def step():
            loss = fn()
            gx, gw = torch.autograd.grad(loss, (x, w))
            return loss, gx, gw
        try:
            out = step()
        except Exception as e:  # a peer that fails here is recorded with its error
            report.checks[name] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            continue
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
                                         "peak_extra_less_gradients_gib": peak - gradient_gib,
                                         "loss": out[0].item()}))
        report.checks[f"{name} outputs"] = out
        print(f"{name:14} {ms:8.2f} ms  {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s  peak extra {peak:6.2f} GiB  loss {out[0].item():.5f}")
    outs = report.checks
    for name in [k[:-len(" outputs")] for k in list(outs) if k.endswith(" outputs") and k != "torch eager outputs"]:
        got = outs.pop(f"{name} outputs")
        report.checks[f"{name} vs eager: loss diff, grad rel err"] = [
            abs(got[0].item() - ref[0].item()),
            max(float((a.float() - b.float()).norm() / b.float().norm()) for a, b in zip(got[1:], ref[1:]))]
    outs.pop("torch eager outputs")
    print(report.table())
    report.write(args.out)


if __name__ == "__main__":
    main()
