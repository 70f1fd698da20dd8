"""Trains a small Llama on real text with tilegrid's modules, and the same model in plain PyTorch
from the same initial weights and batches, and compares the loss curves.

    python examples/train_llama.py [--device cpu|cuda] [--steps N] [--size tiny|small|full] [--out DIR]
    torchrun --nproc-per-node N examples/train_llama.py [...] [--compare-with ONE_GPU.json]

Under torchrun the models train data-parallel (DistributedDataParallel over NCCL on GPUs, gloo
on CPUs): every rank takes its 1/N of the same global batch, so the loss curve is the
one-process curve's; --compare-with a one-process run's llama_training.json prints their
distance. Rank 0 writes the results.

Data: the Python standard library's own sources (every .py file under sysconfig's "stdlib"
path, in sorted order), read as bytes: a byte-level vocabulary of 256. The last 2% of the bytes
are held out; the loss on them is reported at the end.

Models (Hugging Face's Llama architecture and state_dict names; no tied embeddings):
- tilegrid: tg.nn.LlamaDecoderLayer layers (RMSNorm kernels; Q, K and V as one product with
  RoPE in its epilogue; tg.flash_attn_func causal attention forward and backward; the MLP's
  SwiGLU in GEMM epilogues; tg.linear for the O projection),
  a final tg.nn.RMSNorm and the LM head with the loss as tg.linear_cross_entropy;
- torch: the same layers written with torch.nn.functional (rms_norm, linear,
  scaled_dot_product_attention, silu, cross_entropy on the materialized logits).
Both are bfloat16 (weights, activations and AdamW's state); a third run, the torch model in
float32, is the yardstick: the tilegrid curve's distance from it must be at most twice the
torch bf16 curve's (see compare()).

Sizes: "full" is 8 layers, d 1024, 8 heads of 128, MLP 2816, 16 sequences of 1024 bytes a step
(the issue's configuration; a GPU run); "small" is 4 layers, d 512 (the demo's GPU run); "tiny"
is 2 layers, d 128, 64-byte sequences (the CPU run).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import sysconfig
import time
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

import tilegrid as tg
from png import line_chart

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    seq: int
    batch: int
    lr: float
    vocab: int = 256
    eps: float = 1e-6
    rope_theta: float = 10000.0
    warmup: int = 20

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attn + mlp + 2 * self.hidden) + 2 * self.vocab * self.hidden + self.hidden


SIZES = {
    "full": Config(layers=8, hidden=1024, heads=8, kv_heads=8, intermediate=2816, seq=1024, batch=16, lr=1e-3),
    "small": Config(layers=4, hidden=512, heads=4, kv_heads=4, intermediate=1408, seq=512, batch=16, lr=1e-3),
    "tiny": Config(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=384, seq=64, batch=8, lr=3e-3),
}


def read_corpus(limit_bytes: Optional[int] = None) -> torch.Tensor:
    """The standard library's .py sources, concatenated in sorted path order: uint8 [N]."""
    root = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        if os.sep + "site-packages" + os.sep in path:
            continue
        with open(path, "rb") as f:
            data = f.read()
        chunks.append(data)
        total += len(data)
        if limit_bytes is not None and total >= limit_bytes:
            break
    if total < 1 << 16:
        raise RuntimeError(f"train_llama: only {total} bytes of Python sources under {root}")
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def batch_starts(n_bytes: int, cfg: Config, steps: int, seed: int) -> torch.Tensor:
    """Random sequence offsets [steps, batch], the same for every model trained."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_bytes - cfg.seq - 1, (steps, cfg.batch), generator=g)


def make_batch(data: torch.Tensor, starts: torch.Tensor, seq: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    idx = starts[:, None] + torch.arange(seq + 1)
    tokens = data[idx].to(torch.int64)
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


# ---- the plain PyTorch model --------------------------------------------------------------

def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class TorchAttention(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.hidden, cfg.head_dim
        self.q_proj = torch.nn.Linear(d, cfg.heads * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, cfg.kv_heads * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, cfg.kv_heads * hd, bias=False)
        self.o_proj = torch.nn.Linear(cfg.heads * hd, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        cfg = self.cfg
        q = self.q_proj(x).view(b, s, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = tg.nn.llama.rotary_cos_sin(torch.arange(s, device=x.device), cfg.head_dim, cfg.rope_theta, x.dtype)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=cfg.heads != cfg.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, cfg.heads * cfg.head_dim))


class TorchMLP(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.gate_proj = torch.nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = torch.nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = torch.nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TorchNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class TorchLayer(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.input_layernorm = TorchNorm(cfg.hidden, cfg.eps)
        self.self_attn = TorchAttention(cfg)
        self.post_attention_layernorm = TorchNorm(cfg.hidden, cfg.eps)
        self.mlp = TorchMLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class TorchLlama(torch.nn.Module):
    """A Llama causal LM in plain PyTorch; loss = mean next-byte cross-entropy."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = torch.nn.ModuleList(TorchLayer(cfg) for _ in range(cfg.layers))
        self.norm = TorchNorm(cfg.hidden, cfg.eps)
        self.lm_head = torch.nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


# ---- the same model from tilegrid's modules -----------------------------------------------

class TilegridLlama(torch.nn.Module):
    """The same model and state_dict names, built from tg.nn modules and tg.linear_cross_entropy."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = torch.nn.ModuleList(
            tg.nn.LlamaDecoderLayer(cfg.hidden, cfg.heads, cfg.intermediate, num_key_value_heads=cfg.kv_heads,
                                    rms_norm_eps=cfg.eps, rope_theta=cfg.rope_theta)
            for _ in range(cfg.layers))
        self.norm = tg.nn.RMSNorm(cfg.hidden, eps=cfg.eps)
        self.lm_head = torch.nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return tg.linear_cross_entropy(self.norm(x), self.lm_head.weight, targets)


def initial_weights(cfg: Config, seed: int) -> dict:
    """Hugging Face's Llama initialization (normal, std 0.02; norms 1) as a float32 state_dict."""
    torch.manual_seed(seed)
    model = TorchLlama(cfg)
    for name, p in model.named_parameters():
        if not name.endswith("norm.weight"):
            torch.nn.init.normal_(p, std=0.02)
    return model.state_dict()


def _world() -> tuple[int, int]:
    """(rank, world size) of the data-parallel run, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_one(model: torch.nn.Module, cfg: Config, data: torch.Tensor, starts: torch.Tensor,
              held_out: torch.Tensor, held_starts: torch.Tensor, device) -> dict:
    """AdamW (betas 0.9/0.95, weight decay 0.1), linear warm-up then cosine decay to 10%,
    gradients clipped at norm 1. Returns the per-step losses, the held-out loss and tokens/s.
    Data-parallel (model a DistributedDataParallel): this rank's rows of every global batch;
    the losses reported are the global batch's (the ranks' means averaged)."""
    rank, world = _world()
    if cfg.batch % world:
        raise ValueError(f"train_llama: the batch ({cfg.batch}) must split evenly over {world} ranks")
    share = cfg.batch // world
    mine = slice(rank * share, (rank + 1) * share)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    steps = starts.shape[0]

    def lr_at(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        progress = (step - cfg.warmup) / max(steps - cfg.warmup, 1)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    losses = []
    timed_from = min(5, steps - 1)  # the first steps include kernel loading and allocator growth
    t0 = None
    for step in range(steps):
        if step == timed_from:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        tokens, targets = make_batch(data, starts[step][mine], cfg.seq, device)
        loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        losses.append(loss.detach())
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    losses = torch.stack(losses).float()
    if world > 1:  # the global batch's loss: the mean of the ranks' (equal) shares
        dist.all_reduce(losses)
        losses /= world
    losses = losses.tolist()
    plain = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    with torch.no_grad():
        held = [float(plain(*make_batch(held_out, s, cfg.seq, device))) for s in held_starts]
    return {"losses": losses, "held_out_loss": sum(held) / len(held),
            "tokens_per_s": (steps - timed_from) * cfg.batch * cfg.seq / seconds,
            "seconds_timed": seconds}


def curve_distance(a: list, b: list, window: int = 10) -> float:
    """Mean |a - b| of two loss curves averaged over `window` consecutive steps, leaving out
    the first two windows (the loss falls from ln 256 by tenths of a nat a step there)."""

    def smooth(v):
        return [sum(v[i:i + window]) / window for i in range(0, len(v) - window + 1, window)]

    sa, sb = smooth(a), smooth(b)
    pairs = list(zip(sa, sb))[2:] or list(zip(sa, sb))
    return sum(abs(x - y) for x, y in pairs) / len(pairs)


def compare(runs: dict, window: int = 10) -> dict:
    """Distances between loss curves: the mean over the steps after warm-up of |a - b| where a
    and b are the curves averaged over `window` consecutive steps (the same batches in both).
    The tilegrid curve passes when its distance from the float32 torch curve is at most twice
    the bf16 torch curve's distance from it, plus 0.01 nats (FlashAttention's test criterion,
    an error at most 2x that of the plain bf16 implementation, applied to the loss curve; the
    0.01 keeps two nearly identical curves from being held to zero)."""

    distance = lambda a, b: curve_distance(a, b, window)  # noqa: E731
    out = {"tilegrid_vs_torch_bf16": distance(runs["tilegrid_bf16"]["losses"], runs["torch_bf16"]["losses"])}
    if "torch_fp32" in runs:
        out["torch_bf16_vs_torch_fp32"] = distance(runs["torch_bf16"]["losses"], runs["torch_fp32"]["losses"])
        out["tilegrid_vs_torch_fp32"] = distance(runs["tilegrid_bf16"]["losses"], runs["torch_fp32"]["losses"])
        out["bound"] = 2 * out["torch_bf16_vs_torch_fp32"] + 0.01
        out["within_bound"] = out["tilegrid_vs_torch_fp32"] <= out["bound"]
    return out


def train(device, size: str = "tiny", steps: int = 60, out_dir: Optional[str] = None,
          with_fp32: bool = True, seed: int = 0, corpus_limit: Optional[int] = None) -> dict:
    """Trains the tilegrid model, the torch model in bf16 and (with_fp32) in float32 from the same
    weights and batches; writes llama_training_loss.png and llama_training.json into out_dir."""
    device = torch.device(device)
    cfg = SIZES[size]
    data = read_corpus(corpus_limit)
    split = int(0.98 * data.numel())
    train_data, held_out = data[:split], data[split:]
    starts = batch_starts(train_data.numel(), cfg, steps, seed)
    held_starts = batch_starts(held_out.numel(), cfg, 4, seed + 1)
    weights = initial_weights(cfg, seed)
    runs = {}
    for name, cls, dtype in (("tilegrid_bf16", TilegridLlama, torch.bfloat16), ("torch_bf16", TorchLlama, torch.bfloat16),
                             ("torch_fp32", TorchLlama, torch.float32)):
        if name == "torch_fp32" and not with_fp32:
            continue
        model = cls(cfg)
        model.load_state_dict(weights)
        model.to(device=device, dtype=dtype)
        if _world()[1] > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
        runs[name] = train_one(model, cfg, train_data, starts, held_out, held_starts, device)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result = {"config": dataclasses.asdict(cfg), "size": size, "parameters": cfg.parameters(),
              "steps": steps, "device": str(device), "world_size": _world()[1],
              "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "corpus_bytes": int(data.numel()), "runs": runs, "comparison": compare(runs)}
    if out_dir and _world()[0] == 0:
        os.makedirs(out_dir, exist_ok=True)
        line_chart(os.path.join(out_dir, "llama_training_loss.png"),
                   [runs[k]["losses"] for k in ("tilegrid_bf16", "torch_bf16", "torch_fp32") if k in runs], log_y=False)
        with open(os.path.join(out_dir, "llama_training.json"), "w") as f:
            json.dump(result, f, indent=1)
    return result


def summary(result: dict) -> str:
    cmp_ = result["comparison"]
    lines = [f"Llama {result['size']} ({result['parameters'] / 1e6:.1f}M parameters), {result['steps']} steps on "
             f"{result['corpus_bytes'] / 1e6:.1f} MB of Python sources, {result['device']}"]
    for name, run in result["runs"].items():
        lines.append(f"  {name:14} loss {run['losses'][0]:.3f} -> {run['losses'][-1]:.3f}, held-out "
                     f"{run['held_out_loss']:.3f}, {run['tokens_per_s']:,.0f} tokens/s")
    text = f"  loss-curve distance (nats): tilegrid-torch bf16 {cmp_['tilegrid_vs_torch_bf16']:.4f}"
    if "bound" in cmp_:
        text += (f"; from torch fp32: tilegrid {cmp_['tilegrid_vs_torch_fp32']:.4f}, torch bf16 "
                 f"{cmp_['torch_bf16_vs_torch_fp32']:.4f}; bound 2x + 0.01 = {cmp_['bound']:.4f}: "
                 f"{'within' if cmp_['within_bound'] else 'OUTSIDE'}")
    lines.append(text)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--size", choices=sorted(SIZES), default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--no-fp32", action="store_true", help="skip the float32 torch run")
    parser.add_argument("--out", default=os.path.join(_ROOT, "demo_output"))
    parser.add_argument("--compare-with", default=None,
                        help="a one-process run's llama_training.json: print the curves' distance")
    args = parser.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and tg.with_cuda else "cpu"))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torchrun: data-parallel
        # NVLink multicast off wherever NCCL runs (tg.distributed's docstring).
        for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
            os.environ.setdefault(key, "0" if key == "NCCL_NVLS_ENABLE" else "1")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
    size = args.size or ("full" if device.type == "cuda" else "tiny")
    steps = args.steps or (300 if device.type == "cuda" else 60)
    result = train(device, size, steps, args.out, with_fp32=not args.no_fp32)
    if _world()[0] == 0:
        print(summary(result))
        print(f"loss curves (blue tilegrid bf16, red torch bf16, green torch fp32) in "
              f"{os.path.join(args.out, 'llama_training_loss.png')}")
        if args.compare_with:
            with open(args.compare_with) as f:
                other = json.load(f)
            for name, run in result["runs"].items():
                if name in other["runs"]:
                    d = curve_distance(run["losses"], other["runs"][name]["losses"])
                    print(f"  {name}: {result['world_size']} ranks against {other.get('world_size', 1)}: "
                          f"curve distance {d:.4f} nats; tokens/s {run['tokens_per_s']:,.0f} against "
                          f"{other['runs'][name]['tokens_per_s']:,.0f}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
