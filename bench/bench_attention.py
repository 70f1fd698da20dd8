"""Flash attention forward on the GPU: tilegrid vs torch SDPA's cuDNN and flash backends and,
when present, FlashAttention-3 and FlashAttention-4's CuTe-DSL kernels (`flash_attn.cute`, the
`flash-attn-4` wheel; sm90 kernels on Hopper), in FlashAttention-3's setup: 16k tokens per batch
(batch = 16384 / seqlen), hidden 2048 (heads = 2048 / head_dim), head dims 64/128/256,
seqlen 512..16k, causal and not, bf16.

    python bench/bench_attention.py --out results.json [--head-dims 64 128] [--seqlens 512 1024]
                                    [--no-variants] [--systems tilegrid "torch SDPA cuDNN"]

FlashAttention-3 (the hopper/ part of github.com/Dao-AILab/flash-attention; not a dependency of
tilegrid) runs as the system "FlashAttention-3" when `import flash_attn_interface` works: the
package installed, or its in-place build directory on PYTHONPATH. A build with only bf16
forward for head dims 64/128/256 is enough. Without it the results' checks say
"FlashAttention-3: not measured: <import error>", and the run goes on; naming it in --systems
is never an error either.

FLOPs counted as FlashAttention does: 4 * batch * heads * seqlen^2 * head_dim (two matrix
products), halved for causal. Each result's extra holds its TFLOP/s. Every system's output is
compared with the others' in the same run (max abs difference to the first system that ran),
and with a float32 SDPA math reference on the smallest problem of each head dim.
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
from attention_switch_variants import SWITCH_VARIANTS, runs_at  # noqa: E402

import tilegrid as tg  # noqa: E402
from tilegrid import _C  # noqa: E402
from tilegrid.kernel_choice import (  # noqa: E402
    hopper_kernels_run_on,
    requested_kernel,
    set_kernel_choice,
)

TOKENS = 16384
HIDDEN = 2048
HEAD_DIMS = [64, 128, 256]
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]


def sdpa(backend):
    """SDPA on (b, s, h, d) tensors through one backend (transposed views, no copies)."""

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
            )
        return out.transpose(1, 2)

    return run


# Imported once here: the extension registers its operators with torch when it loads.
fa3, FA3_ERROR = harness.optional_import("flash_attn_interface")
FA3 = "FlashAttention-3"
fa4, FA4_ERROR = harness.optional_import("flash_attn.cute")
FA4 = "FlashAttention-4 (CuTe-DSL)"


def flash_attention_3(q, k, v, causal):
    """FA3's flash_attn_func on (b, s, h, d) tensors, its native layout. Sources before
    2025-08-29 return (out, softmax_lse), later ones out alone (the lse only on request).
    FA3 aligns the causal mask to the bottom right, SDPA to the top left: the same mask here,
    as seqlen_q == seqlen_k."""
    out = fa3.flash_attn_func(q, k, v, causal=causal)
    return out[0] if isinstance(out, tuple) else out


def flash_attention_4(q, k, v, causal):
    """FA4's CuTe-DSL flash_attn_func on (b, s, h, d) tensors; it returns (out, lse). Its first
    call of a shape compiles the kernel (tens of seconds): the harness's warm-up takes it."""
    out = fa4.flash_attn_func(q, k, v, causal=causal)
    return out[0] if isinstance(out, tuple) else out


def tilegrid_kernel(kernel, sm90_switches=-1):
    """tg.flash_attn_func with the CUDA kernel chosen through the kernel choice and the Hopper
    variant through its private hook (two atomic stores per call, microseconds against the
    kernel's time)."""

    def run(q, k, v, causal):
        set_kernel_choice("attention", kernel)
        _C._attention_set_sm90_switches(sm90_switches)
        return tg.flash_attn_func(q, k, v, causal=causal)

    return run


# "tilegrid" is the requested choice (TILEGRID_ATTENTION_KERNEL, else auto: the Hopper kernel
# with its default variant on compute capability 9.0). There the portable kernel runs too, and
# - in bfloat16, the only dtype with every combination compiled - the Hopper kernel once per
# other variant, so the table shows what ping-pong, conditional rescaling and software exp2
# are each worth (the variants and their bits: attention_switch_variants.py).
SYSTEMS = [
    ("tilegrid", tilegrid_kernel(requested_kernel("attention"))),
    ("torch SDPA cuDNN", sdpa(SDPBackend.CUDNN_ATTENTION)),
    ("torch SDPA flash", sdpa(SDPBackend.FLASH_ATTENTION)),
] + ([(FA3, flash_attention_3)] if fa3 is not None else []) \
  + ([(FA4, flash_attention_4)] if fa4 is not None else [])
SM90_SYSTEMS = [("tilegrid portable", tilegrid_kernel("portable"))]
SM90_SWITCH_SYSTEMS = [(name, tilegrid_kernel("sm90", bits)) for name, bits in SWITCH_VARIANTS]


def systems_for(head_dim):
    return [(n, fn) for n, fn in SYSTEMS if runs_at(n, head_dim)]


def flops(batch, heads, seqlen, head_dim, causal):
    f = 4 * batch * heads * seqlen * seqlen * head_dim
    return f // 2 if causal else f


def cross_check(report, problem, q, k, v, causal):
    """Max abs difference of each system's output to the first one that runs."""
    first_name, first = None, None
    for name, fn in systems_for(q.shape[-1]):
        try:
            out = fn(q, k, v, causal).float()
        except Exception as e:  # recorded, not fatal
            report.checks[f"{problem} {name}"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
            continue
        if first is None:
            first_name, first = name, out
            report.checks[f"{problem} {name} has NaN"] = bool(out.isnan().any().item())
            continue
        diff = (out - first).abs().max().item()
        report.checks[f"{problem} {name} max_abs_diff vs {first_name}"] = diff


def reference_check(report, head_dim, dtype):
    """Each system against float32 SDPA math on a small problem."""
    q, k, v = (torch.randn(2, 1000, 4, head_dim, device="cuda", dtype=dtype) for _ in range(3))
    for causal in (False, True):
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(
                q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2),
                is_causal=causal,
            ).transpose(1, 2)
        for name, fn in systems_for(head_dim):
            key = f"d{head_dim} s1000 {'causal' if causal else 'full'} {name} max_abs_err vs fp32 math"
            try:
                report.checks[key] = (fn(q, k, v, causal).float() - ref).abs().max().item()
            except Exception as e:
                report.checks[key] = f"failed: {type(e).__name__}: {str(e)[:200]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--head-dims", type=int, nargs="*", default=HEAD_DIMS)
    parser.add_argument("--seqlens", type=int, nargs="*", default=SEQLENS)
    parser.add_argument("--no-variants", action="store_true",
                        help="only tilegrid's default and the references (no portable/sm90 rows)")
    parser.add_argument("--systems", nargs="*", default=None,
                        help="run only the systems of these names (default: all)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    if hopper_kernels_run_on("attention", torch.cuda.current_device()) and not args.no_variants:
        SYSTEMS[1:1] = SM90_SYSTEMS + (SM90_SWITCH_SYSTEMS if dtype == torch.bfloat16 else [])
    if args.systems is not None:
        # FA3 and FA4 are known names even when they do not import: their absence goes into
        # the checks.
        known = [n for n, _ in SYSTEMS] + ([FA3] if fa3 is None else []) + ([FA4] if fa4 is None else [])
        unknown = sorted(set(args.systems) - set(known))
        if unknown:
            parser.error(f"unknown systems {unknown}; expected names from {known}")
        SYSTEMS[:] = [(name, fn) for name, fn in SYSTEMS if name in args.systems]

    report = harness.Report("attention")
    if fa3 is None:
        report.checks[FA3] = f"not measured: {FA3_ERROR}"
    elif args.systems is not None and FA3 not in args.systems:
        report.checks[FA3] = "not measured: not among --systems"
    else:
        # Relative to the working directory (the repository root when run from there).
        report.checks[FA3] = f"flash_attn_interface from {os.path.relpath(fa3.__file__)}"
    if fa4 is None:
        report.checks[FA4] = f"not measured: {FA4_ERROR}"
    elif args.systems is not None and FA4 not in args.systems:
        report.checks[FA4] = "not measured: not among --systems"
    report.measure_ceilings()
    for head_dim in args.head_dims:
        reference_check(report, head_dim, dtype)
        systems = systems_for(head_dim)
        heads = HIDDEN // head_dim
        for seqlen in args.seqlens:
            batch = max(1, TOKENS // seqlen)
            shape = (batch, seqlen, heads, head_dim)
            # q, k, v and out: 4 tensors of TOKENS x HIDDEN bf16 each (64 MB); rotated past L2.
            nbytes = 4 * batch * seqlen * heads * head_dim * dtype.itemsize
            sets = harness.rotation_count(nbytes)
            qs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            ks = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            vs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            for causal in (False, True):
                problem = f"d{head_dim} s{seqlen} b{batch} h{heads} {'causal' if causal else 'full'}"
                cross_check(report, problem, qs[0], ks[0], vs[0], causal)
                f = flops(batch, heads, seqlen, head_dim, causal)
                with torch.no_grad():
                    harness.run_each(
                        report, "forward", problem, nbytes,
                        [(name, (lambda fn: lambda i: fn(qs[i], ks[i], vs[i], causal))(fn))
                         for name, fn in systems],
                        sets,
                        extra=lambda name, ms, f=f: {"flops": f, "tflops": f / (ms * 1e-3) / 1e12},
                    )
                for r in report.results[-len(systems):]:
                    r.flops = f
            del qs, ks, vs
            torch.cuda.empty_cache()
            report.write(args.out)  # after each shape: a run cut short keeps what it measured

    report.write(args.out)
    print(report.table())
    print("TFLOP/s")
    print(f"{'problem':36} " + " ".join(f"{name:>22}" for name, _ in SYSTEMS))
    by_problem: dict[str, dict[str, float]] = {}
    for r in report.results:
        tf = r.extra.get("tflops")
        by_problem.setdefault(r.problem, {})[r.system] = tf
    for problem, row in by_problem.items():
        cells = " ".join(f"{row[n]:>22.1f}" if row.get(n) else f"{'-':>22}" for n, _ in SYSTEMS)
        print(f"{problem:36} {cells}")


if __name__ == "__main__":
    main()
