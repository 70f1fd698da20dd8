"""Where a workload's GPU time goes, kernel by kernel (torch.profiler, CUDA activity):

    python bench/profile_breakdown.py llama-no-core [--out table.txt]
    python bench/profile_breakdown.py unet-with-maps [--out table.txt]
    python bench/profile_breakdown.py unet-with-maps --host   # where the host's time goes
    python bench/profile_breakdown.py conv-plan [--out table.txt]
    python bench/profile_breakdown.py conv-train [--out table.txt]


llama-no-core: tg.nn.LlamaDecoderLayer forward + backward at Llama-3-8B shapes (T = 8192,
bf16) with bench_llama.py's pass-through core, beside its twelve GEMMs on cuBLAS, the gap
between the two being what the fusion issue's block must remove. unet-with-maps:
tg.nn.SparseUNet inference (channels 32-256, fp16) on bench_sparse_conv.py's 485k-voxel scene
with its level plans built in the call. conv-plan: the submanifold 3x3x3 ConvolutionPlan of
that scene (its map, row order and map in row order), the issue's kernel-map benchmark.
conv-train: one submanifold 3x3x3 C -> C convolution's forward and backward (both gradients)
on that scene at C = 64 and 128, fp16, the plan built once (the gradients accumulate over the
iterations, an add a call). One warm-up, then --iters profiled iterations; the table's times
are totals over them, sorted by GPU time. --host: the Python profile of the
same iterations instead (cProfile, by time spent in each function itself), for workloads whose
wall time exceeds their GPU time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_llama  # noqa: E402
from bench_sparse_conv import scene  # noqa: E402

import tilegrid as tg  # noqa: E402


def llama_no_core():
    D, H, I, KV, T = bench_llama.D, bench_llama.H, bench_llama.I, bench_llama.KV, bench_llama.T
    dev, bf = "cuda", torch.bfloat16
    torch.manual_seed(0)
    layer = tg.nn.LlamaDecoderLayer(D, H, I, num_key_value_heads=KV, device=dev, dtype=bf)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else torch.nn.init.ones_(p)
    x = torch.randn(1, T, D, device=dev, dtype=bf, requires_grad=True)
    dy = torch.randn(1, T, D, device=dev, dtype=bf)
    params = list(layer.parameters())
    tg.nn.llama.flash_attn_func = bench_llama.pass_through_flash_attn
    gemms = bench_llama.gemms_alone(x.view(T, D), layer.state_dict())
    return {"tilegrid layer without core": lambda: torch.autograd.grad(layer(x), [x] + params, dy),
            "the 12 GEMMs alone (cuBLAS)": gemms}


def unet_with_maps():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([scene(20, 0.05)]))
    net = tg.nn.SparseUNet(1, 8, channels=(32, 64, 128, 256)).cuda().half().eval()
    feats = tg.JaggedTensor.from_data_and_offsets(
        torch.ones(grid.total_voxels, 1, device="cuda", dtype=torch.float16), grid.voxel_offsets)

    def with_maps():
        net._cached = None
        with torch.no_grad():
            return net(feats, grid).jdata

    def maps_reused():
        with torch.no_grad():
            return net(feats, grid).jdata

    return {"SparseUNet inference with maps": with_maps,
            "SparseUNet inference with maps reused": maps_reused,
            "SparseUNet level plans": lambda: tg.nn.SparseUNetPlans(grid, net.levels)}


def conv_plan():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([scene(20, 0.05)]))
    return {"3x3x3 ConvolutionPlan": lambda: tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)}


def conv_train():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([scene(20, 0.05)]))
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    runs = {}
    for c in (64, 128):
        x = torch.randn(grid.total_voxels, c, device="cuda", dtype=torch.float16)
        x.requires_grad_()
        w = (torch.randn(c, c, 3, 3, 3, device="cuda") / (27 * c) ** 0.5).half().requires_grad_()
        g = torch.randn(grid.total_voxels, c, device="cuda", dtype=torch.float16)
        runs[f"C={c} forward + backward"] = lambda x=x, w=w, g=g: plan.execute(x, w).backward(g)
    return runs


WORKLOADS = {"llama-no-core": llama_no_core, "unet-with-maps": unet_with_maps,
             "conv-plan": conv_plan, "conv-train": conv_train}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--out")
    parser.add_argument("--host", action="store_true")
    args = parser.parse_args()
    text = []
    for name, fn in WORKLOADS[args.workload]().items():
        fn()
        torch.cuda.synchronize()
        if args.host:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.iters):
                fn()
            torch.cuda.synchronize()
            profiler.disable()
            stream = io.StringIO()
            pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(args.rows)
            text.append(f"## {name}: {args.iters} iterations, host profile\n{stream.getvalue()}")
            continue
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.iters):
                fn()
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_time_total > 0]
        total = sum(e.self_device_time_total for e in events)
        text.append(f"## {name}: {args.iters} iterations, GPU time {total / 1e3 / args.iters:.3f} ms an iteration")
        text.append(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.rows,
                                              max_name_column_width=110))
    out = "\n".join(text)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
