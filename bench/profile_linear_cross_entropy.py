"""Where tg.linear_cross_entropy's time goes, step by step, at Llama-3's LM head (V 128256,
d 4096, T 8192, bf16) for several chunk sizes: each step of the chunk loop summed over the
chunks (the logits product, the cross-entropy row kernel, d x, d W), timed alone with CUDA
events (median of --iters), next to the same products on cuBLAS (torch.mm) at the chunk's
shape. The full op at each chunk size, for the sum to be compared against. Written because
8 chunks of 1024 rows took 31 ms more than one of 8192 (2026-12-03_h200_linear_cross_entropy_row_kernel.json).

    python bench/profile_linear_cross_entropy.py --out steps.json [--chunks 1024 2088 4096 8192]

The row kernel's bandwidth is reported against the 6 bytes an element it moves (two reads,
one write).
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1024, 2088, 4096, 8192])
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    T, D, V = args.tokens, args.hidden, args.vocab
    report = harness.Report("linear cross-entropy steps")
    report.measure_ceilings()
    torch.manual_seed(0)
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(V, D, device="cuda") / 64).to(torch.bfloat16)
    t = torch.randint(0, V, (T,), device="cuda")
    stream = current_stream(x)
    scale = torch.full((1,), 1.0 / T, device="cuda")
    loss = torch.empty(T, device="cuda")
    dx = torch.empty_like(x)
    dw = torch.empty_like(w)

    for rows in args.chunks:
        starts = list(range(0, T, rows))
        buffer = torch.empty(min(rows, T), V, device="cuda", dtype=torch.bfloat16)

        def each(step):
            """fn(i): `step` over every chunk of the loop, in its order."""
            def run(_):
                for i, s in enumerate(starts):
                    step(i, s, x[s:s + rows], buffer[:min(rows, T - s)])
            return run

        steps = {
            "logits = x W^T (tg.matmul)": lambda i, s, xc, lg: _C.matmul(xc, w.t(), lg, stream),
            "logits (cuBLAS)": lambda i, s, xc, lg: torch.mm(xc, w.t(), out=lg),
            "row kernel": lambda i, s, xc, lg: _C.cross_entropy_loss_and_grad(
                lg, t[s:s + lg.shape[0]], -100, loss[s:s + lg.shape[0]], scale, stream),
            "d x = d logits W (tg.matmul)": lambda i, s, xc, lg: _C.matmul(
                lg, w, dx[s:s + lg.shape[0]], stream),
            "d x (cuBLAS)": lambda i, s, xc, lg: torch.mm(lg, w, out=dx[s:s + lg.shape[0]]),
            "d W (+)= d logits^T x (cuBLAS, bf16)": lambda i, s, xc, lg: (
                torch.mm(lg.t(), xc, out=dw) if i == 0 else dw.addmm_(lg.t(), xc)),
            "d W (cuBLAS, fp32 out, no accumulation)": lambda i, s, xc, lg: torch.mm(
                lg.t(), xc, out_dtype=torch.float32),
        }
        problem = f"T{T} d{D} V{V} chunk {rows} ({len(starts)} chunks)"
        buffer.normal_()  # finite logits for the row kernel's first timing
        for name, step in steps.items():
            ms = harness.time_ms(each(step), sets=1, warmup=2, iters=args.iters)
            extra = {"tbps": 6 * T * V / (ms * 1e-3) / 1e12} if name == "row kernel" else {}
            report.add(harness.Result("step", problem, name, ms,
                                      bytes=6 * T * V if name == "row kernel" else None))
            print(f"{problem:40} {name:42} {ms:8.3f} ms {extra}")
        xg = x.clone().requires_grad_()
        wg = w.clone().requires_grad_()

        def full(_):
            loss_ = tg.linear_cross_entropy(xg, wg, t, chunk_size=rows)
            torch.autograd.grad(loss_, (xg, wg))
        ms = harness.time_ms(full, sets=1, warmup=2, iters=args.iters)
        report.add(harness.Result("fwd+bwd", problem, "tg.linear_cross_entropy", ms))
        print(f"{problem:40} {'the whole op, forward + backward':42} {ms:8.3f} ms")
        del buffer, xg, wg
        torch.cuda.empty_cache()
    print(report.table())
    report.write(args.out)


if __name__ == "__main__":
    main()
