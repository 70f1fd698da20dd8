"""Fused epilogue programs on the Hopper GEMM: for each program compiled for sm_90a, the GEMM
with the program fused vs the plain tilegrid GEMM (same cooperative 128x256 kernel; the
issue's target is at most 5% extra time) and vs the unfused torch sequence, eager and under
torch.compile, on Llama-3-8B shapes with 8192 tokens (bfloat16 or float16: --dtype; forward
layout y = x w^T).

    python bench/bench_gemm_epilogue.py --out results.json

Programs and shapes:
  bias_gelu_aux      gate_up 4096 -> 28672: y = x w^T + bias, pre = y saved, out = gelu_tanh(y)
  row_scale          qkv 4096 -> 6144:      out = (x w^T) * scale[token]
  residual_add       o 4096 -> 4096:        h = x w^T + residual
  residual_sum_sq    o 4096 -> 4096:        h = x w^T + residual, partial row sums of h^2
                                            (the next RMSNorm's statistic), finished on the GPU
  column_sum         o 4096 -> 4096:        out = x w^T stored, and its sums over the tokens
  rope               qkv 4096 -> 6144:      q, k columns rotated by position * frequency (head
                                            dim 128, 32 q + 8 k heads), v's left as they are
  swiglu             gate_up 4096 -> 28672: w's rows interleave gate and up; out = silu(g) * u,
                                            [8192, 14336] (half the product's width)
  swiglu_aux         gate_up 4096 -> 28672: the same with the [8192, 28672] pre-activation
                                            saved for the backward
  scalar             o 4096 -> 4096:        out = (x w^T) * 0.125
  row_max            o 4096 -> 4096:        out = x w^T stored, and its per-256-column row
                                            maxima, finished on the GPU
  lm_head_logsumexp  lm_head 4096 -> 128256: the logits stored and their row log-sum-exp (a
                                            cross-entropy's normaliser), finished on the GPU
  swiglu_grad        down dgrad 4096 -> 14336: dh = dy w_down (w_down [4096, 14336]) and
                                            with the saved [8192, 28672] (g, u) pairs the
                                            interleaved (dg, du) = dh * (u silu'(g), silu(g))
  gelu_grad_bias     down dgrad 4096 -> 14336: d(pre) = (dy w) * gelu'(pre) stored and its
                                            column sums (the bias gradient)
Times are CUDA-graph replays where the system can be captured (see harness.run_each).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import tilegrid as tg  # noqa: E402
from tilegrid import _C  # noqa: E402
from tilegrid._torch import current_stream  # noqa: E402

TOKENS = 8192
DTYPE = torch.bfloat16  # a and b, and the stores (--dtype)


def randn(*shape):
    """Normal values scaled by 1/8, so that the K = 4096 products are O(1): unscaled, they are
    O(64) and a SwiGLU's g * u passes float16's largest value (65504) somewhere in a [8192,
    14336] output (inf in both the fused result and torch's, and a NaN error)."""
    return torch.randn(*shape, device="cuda", dtype=DTYPE) * 0.125


class Case:
    """One program on one shape: operands and outputs for `sets` rotating input sets, the
    fused program, and the torch reference sequence."""

    def __init__(self, name, layer, m, k, n):
        self.name, self.layer, self.m, self.k, self.n = name, layer, m, k, n

    def make(self, i):
        """(a, b, plain_out, program, torch_fn) for input set i."""
        m, k, n = self.m, self.k, self.n
        plain = torch.empty(m, n, device="cuda", dtype=DTYPE)
        if self.name in ("swiglu_grad", "gelu_grad_bias"):  # data-gradient layout: dy w
            return self.make_backward(plain)
        x, w = randn(m, k), randn(n, k)
        if self.name == "bias_gelu_aux":
            bias = randn(n)
            pre, out = torch.empty_like(plain), torch.empty_like(plain)
            prog = tg.epilogue.Program().per_column(bias).store(pre).elementwise("gelu_tanh") \
                .store(out)

            def torch_fn(x=x, w=w, bias=bias):
                y = x @ w.t() + bias
                return y, F.gelu(y, approximate="tanh")
        elif self.name == "row_scale":
            scale = torch.rand(m, device="cuda") + 0.5
            out = torch.empty_like(plain)
            prog = tg.epilogue.Program().per_row(scale).store(out)

            def torch_fn(x=x, w=w, scale=scale):
                return ((x @ w.t()).float() * scale[:, None]).to(DTYPE)
        elif self.name == "column_sum":
            out = torch.empty_like(plain)
            sums = torch.empty(n, device="cuda")
            prog = tg.epilogue.Program().store(out).column_sum(sums)

            def torch_fn(x=x, w=w):
                y = x @ w.t()
                return y, y.sum(0, dtype=torch.float32)
        elif self.name == "rope":
            positions = torch.arange(m, device="cuda", dtype=torch.int32) % 2048
            inv = 10000.0 ** (-torch.arange(0, 128, 2, device="cuda", dtype=torch.float32) / 128)
            freqs = torch.cat([inv.repeat(40), torch.zeros(8 * 64, device="cuda")])  # q k | v
            out = torch.empty_like(plain)
            prog = tg.epilogue.Program().rope(positions, freqs).store(out)

            def torch_fn(x=x, w=w, positions=positions, freqs=freqs):
                y = (x @ w.t()).float().view(m, n // 2, 2)
                t = positions.float()[:, None] * freqs[None, :]
                c, s = torch.cos(t), torch.sin(t)
                y0, y1 = y[..., 0], y[..., 1]
                return torch.stack([y0 * c - y1 * s, y0 * s + y1 * c], -1).view(m, n).to(DTYPE)
        elif self.name == "scalar":
            out = torch.empty_like(plain)
            prog = tg.epilogue.Program().scalar(0.125).store(out)

            def torch_fn(x=x, w=w):
                return (x @ w.t()) * 0.125
        elif self.name in ("row_max", "lm_head_logsumexp"):
            op = "max" if self.name == "row_max" else "logsumexp"
            out = torch.empty_like(plain)
            partials = torch.empty(m, math.ceil(n / 256), device="cuda")
            prog = tg.epilogue.Program().store(out).row_partials(op, partials, 256)
            prog.finish = (op, partials, torch.empty(m, device="cuda"))

            def torch_fn(x=x, w=w, op=op):
                y = x @ w.t()
                return y, (y.float().amax(1) if op == "max" else torch.logsumexp(y.float(), 1))
        elif self.name in ("swiglu", "swiglu_aux"):
            out = torch.empty(m, n // 2, device="cuda", dtype=DTYPE)
            prog = tg.epilogue.Program()
            if self.name == "swiglu_aux":
                prog = prog.store(torch.empty_like(plain))
            prog = prog.glu("silu").store(out)

            def torch_fn(x=x, w=w):
                y = x @ w.t()
                return y, F.silu(y[:, 0::2]) * y[:, 1::2]
        elif self.name == "residual_add":
            residual = randn(m, n)
            out = torch.empty_like(plain)
            prog = tg.epilogue.Program().tile(residual).store(out)

            def torch_fn(x=x, w=w, residual=residual):
                return x @ w.t() + residual
        else:
            residual = randn(m, n)
            out = torch.empty_like(plain)
            partials = torch.empty(m, math.ceil(n / 256), device="cuda")
            total = torch.empty(m, device="cuda")
            prog = tg.epilogue.Program().tile(residual).store(out) \
                .row_partials("sum_squares", partials, 256)
            prog.finish = ("sum_squares", partials, total)

            def torch_fn(x=x, w=w, residual=residual):
                h = x @ w.t() + residual
                return h, h.float().square().sum(1)
        return x, w.t(), plain, prog, torch_fn

    def make_backward(self, plain):
        m, k, n = self.m, self.k, self.n
        dy, w = randn(m, k), randn(k, n)
        if self.name == "swiglu_grad":
            pre = randn(m, 2 * n)
            out = torch.empty(m, 2 * n, device="cuda", dtype=DTYPE)
            prog = tg.epilogue.Program().glu_grad(pre, "silu").store(out)

            def torch_fn(dy=dy, w=w, pre=pre):
                dh = dy @ w
                g, u = pre[:, 0::2], pre[:, 1::2]
                s = torch.sigmoid(g)
                return torch.stack([dh * u * s * (1 + g * (1 - s)), dh * g * s], -1).view(m, 2 * n)
        else:
            pre = randn(m, n)
            out, sums = torch.empty_like(plain), torch.empty(n, device="cuda")
            prog = tg.epilogue.Program().elementwise_grad("gelu_tanh", pre).store(out) \
                .column_sum(sums)

            def torch_fn(dy=dy, w=w, pre=pre):
                dpre = torch.ops.aten.gelu_backward(dy @ w, pre, approximate="tanh")
                return dpre, dpre.sum(0, dtype=torch.float32)
        return dy, w, plain, prog, torch_fn


def run_program(a, b, prog):
    tg.epilogue.matmul(a, b, prog)
    finish = getattr(prog, "finish", None)
    if finish is not None:  # the statistic a norm or a loss needs: finished as part of it
        tg.epilogue.finish_row_partials(*finish)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16",
                        help="a and b's dtype (the programs store in it too)")
    parser.add_argument("--programs", nargs="*", default=None,
                        help="run only these programs (default: all)")
    args = parser.parse_args()
    global DTYPE
    DTYPE = getattr(torch, args.dtype)
    t = args.tokens
    report = harness.Report("gemm_epilogue")
    report.measure_ceilings()
    if torch.cuda.get_device_capability() != (9, 0):
        report.checks["fused"] = "not measured: the fused programs need a compute capability 9.0 GPU"
        report.write(args.out)
        return

    cases = [Case("bias_gelu_aux", "gate_up", t, 4096, 28672),
             Case("row_scale", "qkv", t, 4096, 6144),
             Case("residual_add", "o", t, 4096, 4096),
             Case("residual_sum_sq", "o", t, 4096, 4096),
             Case("column_sum", "o", t, 4096, 4096),
             Case("rope", "qkv", t, 4096, 6144),
             Case("swiglu", "gate_up", t, 4096, 28672),
             Case("swiglu_aux", "gate_up", t, 4096, 28672),
             Case("scalar", "o", t, 4096, 4096),
             Case("row_max", "o", t, 4096, 4096),
             Case("lm_head_logsumexp", "lm_head", t, 4096, 128256),
             Case("swiglu_grad", "down dgrad", t, 4096, 14336),
             Case("gelu_grad_bias", "down dgrad", t, 4096, 14336)]
    if args.programs is not None:
        unknown = sorted(set(args.programs) - {c.name for c in cases})
        if unknown:
            parser.error(f"unknown programs {unknown}; expected names from {[c.name for c in cases]}")
        cases = [c for c in cases if c.name in args.programs]
    for case in cases:
        m, n, k = case.m, case.n, case.k
        problem = f"{case.name} {case.layer} M{m} N{n} K{k} {args.dtype}"
        nbytes = (m * k + k * n + m * n) * 2
        sets = harness.rotation_count(nbytes)
        data = [case.make(i) for i in range(sets)]
        report.checks[f"{problem} signature"] = data[0][3].signature()

        # Same run, same inputs: the fused program's main output against the torch sequence.
        a0, b0, _, prog0, torch0 = data[0]
        try:
            run_program(a0, b0, prog0)
            ref = torch0()
            last = case.name in ("bias_gelu_aux", "swiglu", "swiglu_aux")
            ref = ref[-1] if last else (ref[0] if isinstance(ref, tuple) else ref)
            got = [s for s in prog0.steps if s[0] == "store"][-1][2]
            report.checks[f"{problem} rel_err vs torch"] = (
                (got.float() - ref.float()).norm() / ref.float().norm()).item()
            # The second result (column sums; finished row partials) against torch's.
            sums = [s[2] for s in prog0.steps if s[0] == "column_sum"]
            finish = getattr(prog0, "finish", None)
            second = sums[-1] if sums else (finish[-1] if finish is not None else None)
            if second is not None:
                want = torch0()[1]
                label = "column sums" if sums else f"row {finish[0]}"
                report.checks[f"{problem} {label} rel_err vs torch"] = (
                    (second - want).norm() / want.norm()).item()
        except Exception as e:  # recorded, not fatal
            report.checks[f"{problem} rel_err vs torch"] = f"failed: {type(e).__name__}: {e}"

        compiled = [torch.compile(d[4]) for d in data] if not args.no_compile else []
        systems = [
            ("tilegrid gemm (plain, cooperative)",
             lambda i: _C.matmul(data[i][0], data[i][1], data[i][2], current_stream(data[i][2]),
                                 "sm90_cooperative")),
            ("tilegrid gemm + fused program", lambda i: run_program(*data[i][0:2], data[i][3])),
            ("torch eager (unfused)", lambda i: data[i][4]()),
        ]
        if compiled:
            systems.append(("torch.compile (unfused graph)", lambda i: compiled[i]()))
        first = len(report.results)
        harness.run_each(report, case.name, problem, nbytes, systems, sets)
        rows = report.results[first:]
        plain = rows[0].median_ms
        for r in rows:
            r.flops = 2 * m * n * k
            if r.median_ms:
                r.extra["tflops"] = r.flops / (r.median_ms * 1e-3) / 1e12
                if plain:
                    r.extra["vs_plain_gemm"] = r.median_ms / plain
        del data, compiled
        torch.cuda.empty_cache()

    report.write(args.out)
    print(report.table())
    print(summary(report))


def summary(report: harness.Report) -> str:
    """Time of each system relative to the plain GEMM (target for the fused one: <= 1.05)."""
    lines = [f"{'problem':52} {'system':36} {'ms':>8} {'vs plain':>8}"]
    for r in report.results:
        ms = f"{r.median_ms:8.3f}" if r.median_ms else f"{'-':>8}"
        ratio = r.extra.get("vs_plain_gemm") if r.median_ms else None
        lines.append(f"{r.problem:52} {r.system:36} {ms} {ratio if ratio is None else f'{ratio:8.3f}'}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
