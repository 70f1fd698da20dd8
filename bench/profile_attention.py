"""One attention shape, run a few times by one system, for a profiler to attach to: the
forward, or with --backward the backward (the forward runs once, then torch.autograd.grad).

    ncu --clock-control none --kernel-name-base demangled \
        -k regex:'flash_fwd_sm90_kernel|FlashAttnFwdSm90' \
        --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
        python bench/profile_attention.py --system tilegrid --head-dim 128 --seqlen 512

The shape is bench_attention.py's (16k tokens a batch, hidden 2048, bf16). --system is
"tilegrid" (the automatic choice, or the Hopper kernel with --sm90-switches) or
"FlashAttention-3" (needs `import flash_attn_interface`, as in bench_attention.py).
scripts/profile_attention.sh profiles both side by side on the shapes where they differ most.
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["tilegrid", "FlashAttention-3"], required=True)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--seqlen", type=int, required=True)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--sm90-switches", type=int, default=-1,
                        help="the Hopper kernel's variant bits (-1: its default for the shape)")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--backward", action="store_true",
                        help="run the backward (every kernel of it) instead of the forward")
    parser.add_argument("--deterministic", action="store_true",
                        help="the backward with deterministic=True (tilegrid only)")
    args = parser.parse_args()

    batch, heads = 16384 // args.seqlen, 2048 // args.head_dim
    shape = (batch, args.seqlen, heads, args.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                           requires_grad=args.backward) for _ in range(3))
    if args.system == "tilegrid":
        import tilegrid as tg
        from tilegrid import _C
        from tilegrid.kernel_choice import set_kernel_choice

        set_kernel_choice("attention", "sm90" if args.sm90_switches >= 0 else "auto")
        _C._attention_set_sm90_switches(args.sm90_switches)
        run = lambda: tg.flash_attn_func(q, k, v, causal=args.causal,  # noqa: E731
                                         deterministic=args.deterministic)
    else:
        import flash_attn_interface

        fa3 = flash_attn_interface.flash_attn_func
        run = lambda: fa3(q, k, v, causal=args.causal)  # noqa: E731
    if args.backward:
        out = run()
        out = out[0] if isinstance(out, tuple) else out
        dout = torch.randn_like(out)
        run = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)  # noqa: E731
    for _ in range(args.runs):
        run()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
