"""Register splits of the Hopper attention forward side by side: each built by
bench/attention_variants.sh (KIND=forward) as a shared library (bench/cuda/
attention_forward_variant.cu, bf16, the library's default kernel for the problem), loaded here
with ctypes and timed against the shipped split ("default") in FlashAttention-3's setup: 16k
tokens a batch (batch = 16384 / seqlen), hidden 2048 (heads = 2048 / head_dim), bf16, causal
and not.

    python bench/bench_attention_forward_variants.py LIBDIR [--head-dims 64 128 256]
                                                     [--seqlens 2048 16384] [--out FILE.json]

Correctness, per variant and problem, before its timing counts: on two heads of the first
sequence, the output's error against float32 attention is at most twice a plain bf16 torch
implementation's plus a floor (FlashAttention's criterion), and the log-sum-exp is within 1e-3
of float32's (outputs are poisoned with NaN first). FlashAttention-3 (`flash_attn_interface`,
when it imports) is timed beside them and checked alike. Timing: CUDA events around batches of
back-to-back calls, the variants interleaved batch by batch, the median batch
(bench_attention_backward_variants.time_interleaved). TFLOP/s as FlashAttention counts the
forward: 4 x batch x heads x seqlen^2 x head_dim, halved for causal.
"""

from __future__ import annotations

import ctypes
import json
import math
import os

import torch

from bench_attention_backward_variants import (HIDDEN, TOKENS, fa3, load_variant, parse_args,
                                               print_table, reference, time_interleaved,
                                               variants_of)


class ForwardVariant:
    """One register split's shared library: hd<d>-<name>.so."""

    def __init__(self, path: str):
        self.name, self.lib = load_variant(path)
        info = (ctypes.c_int * 3)()
        self.lib.tg_variant_describe(info)
        self.head_dim, self.producer_registers, self.consumer_registers = list(info)
        fn = self.lib.tg_variant_forward
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 4 + [ctypes.c_float, ctypes.c_void_p]

    def describe(self) -> str:
        return (f"registers: producer {self.producer_registers}, consumers "
                f"{self.consumer_registers} (two consumer warpgroups)")

    def prepare(self, q, k, v, causal):
        """A callable that runs the forward into (out, lse) allocated here, poisoned first."""
        b, s, h, d = q.shape
        out = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, s), float("nan"), dtype=torch.float32, device=q.device)
        args = [t.data_ptr() for t in (q, k, v, out, lse)]
        args += [b, s, h, int(causal), 1.0 / math.sqrt(d)]

        def run():
            err = self.lib.tg_variant_forward(*args, torch.cuda.current_stream().cuda_stream)
            if err:
                raise RuntimeError(f"{self.name}: {err.decode()}")

        return run, out, lse


def prepare_fa3(q, k, v, causal):
    """FlashAttention-3's forward, as ForwardVariant.prepare returns it."""
    result = {}

    def run():
        got = fa3.flash_attn_func(q, k, v, causal=causal)
        result["out"], result["lse"] = got if isinstance(got, tuple) else (got, None)

    return run, result


def correct(out, lse, plain, exact, exact_lse) -> tuple[bool, float, float]:
    """FlashAttention's criterion on the output, and lse within 1e-3 (when given): (ok, the
    output's error, the plain bf16 error beside it)."""
    e = exact.double()
    err = math.inf if out.isnan().any() else (out.double() - e).abs().max().item()
    plain_err = (plain.double() - e).abs().max().item()
    ok = err <= 2 * plain_err + 1e-3 * e.abs().max().item() + 1e-6
    if lse is not None:
        lse_err = (lse.double() - exact_lse.double()).abs().max().item()
        ok = ok and not lse.isnan().any() and lse_err <= 1e-3
    return ok, err, plain_err


def main() -> None:
    args = parse_args()
    rows, record = [], []
    for d in args.head_dims:
        variants = variants_of(args.libdir, d, ForwardVariant)
        if not variants:
            continue
        for seqlen in args.seqlens:
            batch, heads = TOKENS // seqlen, HIDDEN // d
            for causal in (False, True):
                torch.manual_seed(seqlen + d)
                q, k, v_ = (torch.randn(batch, seqlen, heads, d, device="cuda").to(torch.bfloat16)
                            for _ in range(3))
                one = (slice(0, 1), slice(None), slice(0, 2))  # first sequence, two heads
                exact, exact_lse = reference(q[0, :, :2], k[0, :, :2], v_[0, :, :2], causal=causal,
                                             dtype=torch.float32)
                plain = reference(q[0, :, :2], k[0, :, :2], v_[0, :, :2], causal=causal,
                                  dtype=torch.bfloat16)[0]
                exact, exact_lse, plain = exact[None], exact_lse[None], plain[None]
                runs, names, configs, verdicts = [], [], [], []
                for v in variants:
                    run, out, lse = v.prepare(q, k, v_, causal)
                    run()
                    verdicts.append(correct(out[one], lse[:1, :2], plain, exact, exact_lse)[0])
                    runs.append(run)
                    names.append(v.name)
                    configs.append(v.describe())
                if fa3 is not None:
                    run, result = prepare_fa3(q, k, v_, causal)
                    run()
                    lse = result["lse"][:1, :2] if result["lse"] is not None else None
                    verdicts.append(correct(result["out"][one], lse, plain, exact, exact_lse)[0])
                    runs.append(run)
                    names.append("FlashAttention-3")
                    configs.append("flash_attn_interface")
                ms = time_interleaved(runs)
                flops = 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
                for name, config, t, good in zip(names, configs, ms, verdicts):
                    tflops = flops / t / 1e9
                    rows.append((d, seqlen, causal, name, tflops, t, ms[0] / t, good))
                    record.append(dict(head_dim=d, seqlen=seqlen, causal=causal, variant=name,
                                       config=config, ms=t, tflops=tflops, speedup=ms[0] / t,
                                       correct=good))
                    print(f"hd{d} {seqlen} {'causal' if causal else 'full'} {name}: {t:.3f} ms "
                          f"{tflops:.0f} TFLOP/s x{ms[0] / t:.3f} {'ok' if good else 'WRONG'}",
                          flush=True)
                del q, k, v_, runs
                torch.cuda.empty_cache()
                if args.out:  # after every problem: a run cut short keeps what it measured
                    with open(args.out, "w") as f:
                        json.dump(dict(device=torch.cuda.get_device_name(), rows=record), f,
                                  indent=1)
    print_table(rows)


if __name__ == "__main__":
    main()
