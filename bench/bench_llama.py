"""Llama-3-8B shapes (hidden 4096, intermediate 14336, 32 heads, 8 KV heads), T = 8192 tokens
(batch 1), bf16, forward + backward: tg.nn.LlamaMLP and tg.nn.LlamaDecoderLayer against the
same math in eager torch (F.linear, silu * mul, torch SDPA) and torch.compile of it; and the
layer without its attention core (the issue's "block without attention": every system's core
replaced by the same pass-through, below) against its twelve GEMMs alone on cuBLAS.

    python bench/bench_llama.py --out results.json [--iters 10]

Time: CUDA events around forward + backward (gradients of the input and of every weight),
median of --iters after warm-up. The gradients of each system are compared with eager's.
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

D, I, H, KV, T = 4096, 14336, 32, 8, 8192


def eager_mlp(x, g, u, d):
    return F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)


def rot(t):
    h = t.shape[-1] // 2
    return torch.cat([-t[..., h:], t[..., :h]], -1)


def eager_layer(x, w, cos, sin):
    def norm(t, weight):
        tf = t.float()
        return (tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(t.dtype) * weight
    b, s, _ = x.shape
    hd = D // H
    h = norm(x, w["input_layernorm.weight"])
    q = F.linear(h, w["self_attn.q_proj.weight"]).view(b, s, H, hd).transpose(1, 2)
    k = F.linear(h, w["self_attn.k_proj.weight"]).view(b, s, KV, hd).transpose(1, 2)
    v = F.linear(h, w["self_attn.v_proj.weight"]).view(b, s, KV, hd).transpose(1, 2)
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, s, D), w["self_attn.o_proj.weight"])
    h = norm(x, w["post_attention_layernorm.weight"])
    return x + eager_mlp(h, w["mlp.gate_proj.weight"], w["mlp.up_proj.weight"], w["mlp.down_proj.weight"])


# The attention core's stand-in for the block-without-attention timing: zeros shaped and laid
# out as q (torch.zeros_like: q's own layout where q is dense, as eager's transposed q is;
# contiguous where it is not, as tilegrid's q, a column block of the QKV product, is), and in
# the backward zeros as q's, k's and v's gradients. It is an opaque custom op, so that no
# compiler can drop the k and v products (or their weight gradients) as unused; every
# projection's forward and backward products run, and the core costs the same four memsets
# in every system. (Before, out = q + 0 * (k.sum() + v.sum()) and dk, dv copies of dout's first
# heads: an elementwise pass over q whose cost depended on q's layout, 85 us on tilegrid's
# strided q against a vectorized pass on eager's, plus two reductions and two copies.) The
# output is not the layer's, so the systems' gradients are not compared.
@torch.library.custom_op("tilegrid_bench::core_stand_in", mutates_args=())
def core_stand_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(q)


@core_stand_in.register_fake
def _(q, k, v):
    return torch.empty_like(q)


@torch.library.custom_op("tilegrid_bench::core_stand_in_backward", mutates_args=())
def core_stand_in_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


@core_stand_in_backward.register_fake
def _(dout, q, k, v):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _stand_in_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _stand_in_backward(ctx, dout):
    return core_stand_in_backward(dout, *ctx.saved_tensors)


core_stand_in.register_autograd(_stand_in_backward, setup_context=_stand_in_setup)


def pass_through_flash_attn(q, k, v, causal=True):
    return core_stand_in(q, k, v)


def pass_through_sdpa(q, k, v, is_causal=True, enable_gqa=True):
    return core_stand_in(q, k, v)


def gemms_alone(x2d, w):
    """The layer's twelve products on cuBLAS (torch.mm), forward and backward: QKV, O,
    gate + up (one product), down; each with its data and weight gradients."""
    weights = [torch.cat([w[n].detach() for n in names])
               for names in (("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
                             ("self_attn.o_proj.weight",), ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
                             ("mlp.down_proj.weight",))]
    # Each product's input: the normed rows (QKV, gate + up), the attention output (O: the same
    # shape), the SwiGLU output (down).
    inputs = [x2d.detach()] * 3 + [torch.empty(T, I, device=x2d.device, dtype=x2d.dtype).normal_()]
    outs = [torch.empty(T, wt.shape[0], device=x2d.device, dtype=x2d.dtype) for wt in weights]

    def run():
        for a, wt, o in zip(inputs, weights, outs):
            torch.mm(a, wt.t(), out=o)                 # forward
        for a, wt, o in zip(inputs, weights, outs):
            torch.mm(o, wt)                            # d input
            torch.mm(o.t(), a)                         # d weight
    return run


def timed(fn, iters):
    return harness.time_ms(lambda _: fn(), sets=1, warmup=3, iters=iters)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    report = harness.Report("llama block")
    report.measure_ceilings()
    dev, bf = "cuda", torch.bfloat16
    torch.manual_seed(0)
    layer = tg.nn.LlamaDecoderLayer(D, H, I, num_key_value_heads=KV, rms_norm_eps=1e-6, device=dev, dtype=bf)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else torch.nn.init.ones_(p)
    sd = {k: v.detach().clone().requires_grad_() for k, v in layer.state_dict().items()}
    x = torch.randn(1, T, D, device=dev, dtype=bf, requires_grad=True)
    dy = torch.randn(1, T, D, device=dev, dtype=bf)
    cos, sin = tg.nn.llama.rotary_cos_sin(torch.arange(T, device=dev), D // H, 10000.0, bf)

    # The MLP alone: 3 products forward, 6 backward.
    mlp = layer.mlp
    xm = torch.randn(T, D, device=dev, dtype=bf, requires_grad=True)
    dm = torch.randn(T, D, device=dev, dtype=bf)
    g, u, d = (sd[f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
    mlp_flops = 3 * 2 * T * D * I * 3  # forward 3 GEMMs, backward 6
    compiled_mlp = torch.compile(eager_mlp)
    systems = [
        ("tilegrid", lambda: torch.autograd.grad(mlp(xm), [xm, mlp.gate_up_weight, mlp.down_proj.weight], dm)),
        ("torch eager", lambda: torch.autograd.grad(eager_mlp(xm, g, u, d), [xm, g, u, d], dm)),
        ("torch.compile", lambda: torch.autograd.grad(compiled_mlp(xm, g, u, d), [xm, g, u, d], dm)),
    ]
    ref = systems[1][1]()
    for name, fn in systems:
        got = fn()
        if name == "tilegrid":
            got = [got[0], got[1][0::2], got[1][1::2], got[2]]
        report.checks[f"mlp {name} max rel err of grads vs eager"] = max(
            float(((a.float() - b.float()).norm() / b.float().norm())) for a, b in zip(got, ref))
        ms = timed(fn, args.iters)
        report.add(harness.Result("mlp fwd+bwd", f"T{T} d{D} i{I}", name, ms, flops=mlp_flops,
                                  extra={"tflops": mlp_flops / (ms * 1e-3) / 1e12}))
        print(f"mlp fwd+bwd {name:14} {ms:8.3f} ms {mlp_flops / (ms * 1e-3) / 1e12:7.1f} TFLOP/s")

    # The whole layer (attention included).
    weights = [sd[k] for k in sd]
    compiled_layer = torch.compile(eager_layer)
    params = list(layer.parameters())
    systems = [
        ("tilegrid", lambda: torch.autograd.grad(layer(x), [x] + params, dy)),
        ("torch eager", lambda: torch.autograd.grad(eager_layer(x, sd, cos, sin), [x] + weights, dy)),
        ("torch.compile", lambda: torch.autograd.grad(compiled_layer(x, sd, cos, sin), [x] + weights, dy)),
    ]
    ref_dx = systems[1][1]()[0]
    for name, fn in systems:
        dx = fn()[0]
        report.checks[f"layer {name} rel err of dx vs eager"] = float((dx.float() - ref_dx.float()).norm() / ref_dx.float().norm())
        ms = timed(fn, args.iters)
        report.add(harness.Result("layer fwd+bwd", f"T{T} Llama-3-8B", name, ms))
        print(f"layer fwd+bwd {name:14} {ms:8.3f} ms")
    # The layer without its attention core: the core of each system replaced by the same
    # pass-through (core_stand_in), against the twelve GEMMs alone on cuBLAS.
    gemm_flops = 3 * 2 * T * D * (D + 2 * KV * (D // H) + D + 2 * I + I)
    llama_module = tg.nn.llama
    real_core, real_sdpa = llama_module.flash_attn_func, F.scaled_dot_product_attention
    llama_module.flash_attn_func, F.scaled_dot_product_attention = pass_through_flash_attn, pass_through_sdpa
    try:
        compiled_no_core = torch.compile(eager_layer)
        systems = [
            ("tilegrid", lambda: torch.autograd.grad(layer(x), [x] + params, dy)),
            ("torch eager", lambda: torch.autograd.grad(eager_layer(x, sd, cos, sin), [x] + weights, dy)),
            ("torch.compile", lambda: torch.autograd.grad(compiled_no_core(x, sd, cos, sin), [x] + weights, dy)),
            ("the 12 GEMMs alone (cuBLAS)", gemms_alone(x.view(T, D), sd)),
        ]
        for name, fn in systems:
            ms = timed(fn, args.iters)
            report.add(harness.Result("layer without attention core fwd+bwd", f"T{T} Llama-3-8B", name, ms,
                                      flops=gemm_flops, extra={"tflops": gemm_flops / (ms * 1e-3) / 1e12}))
            print(f"layer without core fwd+bwd {name:28} {ms:8.3f} ms")
    finally:
        llama_module.flash_attn_func, F.scaled_dot_product_attention = real_core, real_sdpa
    print(report.table())
    report.write(args.out)


if __name__ == "__main__":
    main()
