"""Multi-GPU scaling, run under torchrun (one process a GPU, NCCL):

    torchrun --nproc-per-node N bench/bench_distributed.py --out results.json
    python bench/bench_distributed.py --out results.json       # one GPU, without torchrun

1. Context-parallel attention: one 128k-token causal sequence (batch 1, 16 heads of 128,
   bf16) split across the N GPUs in zig-zag shards, tg.distributed.zigzag_ring_flash_attn_func
   forward and forward + backward; at N = 1 also tg.flash_attn_func on the whole sequence (the
   ring's overhead on one GPU). TFLOP/s per GPU counts the causal half of 4 S^2 H D (x 3.5 for
   forward + backward).
2. Data parallel: the Llama of examples/train_llama.py ("full": 8 layers, d 1024, 16 x 1024
   tokens a GPU a step) under DDP, tokens/s per GPU.

Times: CUDA events on rank 0 between barriers, median of --iters. NVLink multicast is kept off
(NCCL_NVLS_ENABLE=0 and its kin, set before NCCL starts).
"""

from __future__ import annotations

import argparse
import os
import sys

for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import harness  # noqa: E402
import train_llama  # noqa: E402

import tilegrid as tg  # noqa: E402


def timed(fn, iters: int) -> float:
    fn()
    times = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def bench_ring(report, world: int, rank: int, iters: int, seqlen: int = 131072, heads: int = 16, dim: int = 128):
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    shape = (1, seqlen // world, heads, dim)
    q, k, v, dout = (torch.randn(shape, device=device, dtype=torch.bfloat16, generator=g) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    flops = 2 * seqlen * seqlen * heads * dim  # causal forward: half of 4 S^2 H D
    problem = f"{seqlen // 1024}k causal, {heads}x{dim}, {world} GPU"

    def fwd():
        return tg.distributed.zigzag_ring_flash_attn_func(q, k, v, causal=True)

    def step():
        return torch.autograd.grad(fwd(), (q, k, v), dout)

    runs = [("attention fwd", fwd, flops), ("attention fwd+bwd", step, int(3.5 * flops))]
    for op, fn, f in runs:
        ms = timed(fn, iters)
        if rank == 0:
            report.add(harness.Result(op, problem, "tilegrid ring (zig-zag)", ms, flops=f, extra={
                "tflops_per_gpu": f / world / (ms * 1e-3) / 1e12}))
    if world == 1:
        for op, fn, f in (("attention fwd", lambda: tg.flash_attn_func(q, k, v, causal=True), flops),
                          ("attention fwd+bwd", lambda: torch.autograd.grad(tg.flash_attn_func(q, k, v, causal=True),
                                                                             (q, k, v), dout), int(3.5 * flops))):
            ms = timed(fn, iters)
            report.add(harness.Result(op, problem, "tilegrid flash_attn_func (one GPU)", ms, flops=f, extra={
                "tflops_per_gpu": f / (ms * 1e-3) / 1e12}))


def bench_ddp(report, world: int, rank: int, iters: int, steps: int = 12):
    cfg = train_llama.SIZES["full"]
    device = torch.device("cuda")
    model = train_llama.TilegridLlama(cfg)
    model.load_state_dict(train_llama.initial_weights(cfg, 0))
    model = torch.nn.parallel.DistributedDataParallel(model.to(device, torch.bfloat16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=g).to(device)

    def step():
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    ms = timed(step, max(iters, steps))
    if rank == 0:
        per_gpu = cfg.batch * cfg.seq / (ms * 1e-3)
        report.add(harness.Result("Llama train step (DDP)", f"{cfg.parameters() / 1e6:.0f}M params, {world} GPU",
                                  "tilegrid tg.nn", ms, extra={"tokens_per_s_per_gpu": per_gpu,
                                                                "tokens_per_s": per_gpu * world}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    if "RANK" not in os.environ:  # run without torchrun: one process, one GPU
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29511"))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    report = harness.Report("distributed")
    bench_ring(report, world, rank, args.iters)
    torch.cuda.empty_cache()
    bench_ddp(report, world, rank, args.iters)
    if rank == 0:
        print(report.table())
        report.write(args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
