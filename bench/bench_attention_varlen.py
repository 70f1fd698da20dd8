"""Variable-length attention on the GPU, forward and backward: tilegrid's flash_attn_varlen_func
against FlashAttention-3's (`flash_attn_interface`, when it imports; built with its
variable-length kernels, i.e. without FLASH_ATTENTION_DISABLE_VARLEN), on sequences whose lengths
follow a real distribution: the sizes in bytes of the Python standard library's source files
(one token a byte), shuffled with a fixed seed, laid end to end and cut into batches of 16k
tokens (a file that crosses a batch's end goes on as a sequence of the next batch; a file longer
than 16k is cut to 16k first). Hidden 2048 (heads = 2048 / head_dim), bf16.

    python bench/bench_attention_varlen.py --out results.json [--head-dims 64 128 256]
                                           [--packs 4] [--iters 5]

The lengths are those of the interpreter that runs the script (its version and the lengths'
statistics are in the JSON's checks). FLOPs as FlashAttention counts them, summed over the
sequences: 4 x heads x length^2 x head_dim for the forward (halved for causal), 2.5x that for
the backward. The forward is timed with CUDA graphs where a system can be captured; the
backward launch by launch (torch.autograd.grad with retain_graph=True, as
bench_attention_backward.py). Each system's output and gradients are compared with tilegrid's
in the same run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import sysconfig

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import tilegrid as tg  # noqa: E402

TOKENS = 16384
HIDDEN = 2048
SEED = 0

fa3, FA3_ERROR = harness.optional_import("flash_attn_interface")


def stdlib_lengths() -> list[int]:
    """Sizes in bytes of the standard library's .py files (site-packages left out), in path
    order, each at least 1 and at most TOKENS."""
    root = sysconfig.get_paths()["stdlib"]
    sizes = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                sizes.append(min(max(os.path.getsize(os.path.join(folder, name)), 1), TOKENS))
    return sizes


def packs(lengths: list[int], count: int) -> list[list[int]]:
    """The first `count` batches of exactly TOKENS tokens: the lengths shuffled (SEED) and laid
    end to end, cut every TOKENS tokens, a sequence cut by a batch's end going on as a sequence
    of the next (as pretraining packs documents)."""
    order = list(lengths)
    random.Random(SEED).shuffle(order)
    out, current, room = [], [], TOKENS
    for n in order:
        while n > 0:
            take = min(n, room)
            current.append(take)
            n, room = n - take, room - take
            if room == 0:
                out.append(current)
                if len(out) == count:
                    return out
                current, room = [], TOKENS
    return out


def varlen_systems():
    systems = [("tilegrid", lambda q, k, v, cu, mx, causal: tg.flash_attn_varlen_func(
        q, k, v, cu, cu, mx, mx, causal=causal))]
    if fa3 is not None:
        def fa3_run(q, k, v, cu, mx, causal):
            out = fa3.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=causal)
            return out[0] if isinstance(out, tuple) else out
        systems.append(("FlashAttention-3", fa3_run))
    return systems


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--head-dims", type=int, nargs="*", default=[64, 128, 256])
    parser.add_argument("--packs", type=int, default=4, help="batches of 16k tokens, one problem each")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    dtype = torch.bfloat16
    report = harness.Report("attention varlen")
    report.checks["FlashAttention-3"] = "measured" if fa3 is not None else f"not measured: {FA3_ERROR}"
    lengths = stdlib_lengths()
    report.checks["lengths"] = (
        f"Python {sys.version.split()[0]} standard library, {len(lengths)} files: median "
        f"{statistics.median(lengths):.0f} bytes, mean {statistics.fmean(lengths):.0f}, "
        f"max {max(lengths)} (cut to {TOKENS})")
    report.measure_ceilings()
    systems = varlen_systems()
    for p, pack in enumerate(packs(lengths, args.packs)):
        total = sum(pack)
        cu = torch.tensor([0] + pack, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
        longest = max(pack)
        report.checks[f"pack {p}"] = (f"{len(pack)} sequences, {total} tokens, longest {longest}, "
                                      f"median {statistics.median(pack):.0f}")
        for head_dim in args.head_dims:
            heads = HIDDEN // head_dim
            shape = (total, heads, head_dim)
            nbytes = 8 * total * heads * head_dim * dtype.itemsize  # q k v o do dq dk dv
            sets = min(harness.rotation_count(nbytes), 4)
            inputs = [[torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
                       for _ in range(3)] for _ in range(sets)]
            douts = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            for causal in (False, True):
                problem = (f"d{head_dim} pack{p} n{len(pack)} t{total} h{heads} "
                           f"{'causal' if causal else 'full'}")
                squares = sum(n * n for n in pack)
                fwd_flops = 4 * heads * squares * head_dim // (2 if causal else 1)
                forward, backward, first = [], [], None
                for name, fn in systems:
                    try:
                        outs = [fn(*qkv, cu, longest, causal) for qkv in inputs]
                        grads = torch.autograd.grad(outs[0], inputs[0], douts[0], retain_graph=True)
                    except Exception as e:  # a system that cannot run this problem is recorded
                        report.checks[f"{problem} {name}"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
                        continue
                    if first is None:
                        first = (name, outs[0], grads)
                    else:
                        diff = max((a.float() - b.float()).abs().max().item()
                                   for a, b in zip((outs[0], *grads), (first[1], *first[2])))
                        report.checks[f"{problem} {name} out/grads max_abs_diff vs {first[0]}"] = diff
                    forward.append((name, (lambda fn: lambda i: fn(
                        *(t.detach() for t in inputs[i]), cu, longest, causal))(fn)))
                    backward.append((name, (lambda outs: lambda i: torch.autograd.grad(
                        outs[i], inputs[i], douts[i], retain_graph=True))(outs)))
                harness.run_each(
                    report, "forward", problem, nbytes // 2, forward, sets, rounds=2, iters=args.iters,
                    extra=lambda name, ms, f=fwd_flops: {"flops": f, "tflops": f / (ms * 1e-3) / 1e12})
                harness.run_each(
                    report, "backward", problem, nbytes, backward, sets, rounds=2, graph=False,
                    iters=args.iters, extra=lambda name, ms, f=fwd_flops * 5 // 2: {
                        "flops": f, "tflops": f / (ms * 1e-3) / 1e12})
                report.write(args.out)  # after each problem: a run cut short keeps what it measured
            del inputs, douts
            torch.cuda.empty_cache()
    report.write(args.out)
    print(report.table())
    for r in report.results:
        tf = r.extra.get("tflops")
        print(f"{r.op:9} {r.problem:40} {r.system:20} " + (f"{tf:8.1f} TFLOP/s" if tf else "-"))


if __name__ == "__main__":
    main()
