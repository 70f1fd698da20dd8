"""A Hugging Face transformers causal LM's training step, end to end, on each stack a user would
pick: tokens/s and peak memory.

    python bench/bench_transformers_training.py --out r.json [--model llama|qwen2]
        [--seqlens 4096 8192] [--steps 10] [--stacks ...]

Model: Llama-3.2-1B's configuration (16 layers, d 2048, 32 heads over 8 KV heads of 64, MLP
8192, vocabulary 128256, tied embeddings, Llama-3 RoPE scaling) or a Qwen2 model of the same
size (q/k/v biases), randomly initialised from the config: nothing is downloaded. One row a
step of `seqlen` tokens, documents of 256 to 2048 tokens packed with restarting position ids
(transformers' DataCollatorWithFlattening format). bfloat16 weights, AdamW (fused) in
bfloat16. Each stack trains a fresh copy of the same weights on the same batches; the first
3 steps are warm-up (compilation), the next `--steps` are timed with CUDA events.

The models run with use_cache=False, as a training step does (a KV cache built every step
only costs time, and under torch.compile a new cache object each step recompiles).

Stacks (those whose package does not import are recorded as not measured, with the reason):
- "transformers sdpa": eager modules, attn_implementation="sdpa";
- "transformers sdpa + compile": the same under torch.compile;
- "liger": liger_kernel's apply_liger_kernel_to_<model> (RoPE, RMSNorm, SwiGLU, fused linear
  cross-entropy) on the sdpa model;
- "flash_attention_3": transformers' FA3 attention (flash_attn_interface), eager modules.
  transformers takes FA3 as available only where a distribution named flash-attn-3 provides
  flash_attn_interface; for FA3 built in place (its hopper/ folder on PYTHONPATH, as
  FlashAttention's own `python setup.py build_ext --inplace` leaves it) the bench declares
  that distribution in a temporary folder before transformers is imported
  (declare_inplace_fa3);
- "tilegrid": tilegrid.integrations.transformers.apply_tilegrid;
- "tilegrid + compile": the same under torch.compile.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import importlib.util
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

WARMUP = 3


def declare_inplace_fa3() -> None:
    """Where flash_attn_interface imports but no installed distribution provides it (FA3 built
    in place), a flash-attn-3 distribution's metadata naming it, in a temporary folder put on
    sys.path, so that transformers' is_flash_attn_3_available() sees it. Before transformers
    is imported: it maps modules to distributions once."""
    if importlib.util.find_spec("flash_attn_interface") is None:
        return
    if "flash_attn_interface" in importlib.metadata.packages_distributions():
        return
    folder = tempfile.mkdtemp(prefix="fa3-dist-")
    info = os.path.join(folder, "flash_attn_3-3.0.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: flash-attn-3\nVersion: 3.0.0\n")
    with open(os.path.join(info, "top_level.txt"), "w") as f:
        f.write("flash_attn_interface\n")
    sys.path.append(folder)


def model_config(name: str):
    from transformers import AutoConfig

    common = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
                  attention_dropout=0.0, tie_word_embeddings=True)
    if name == "llama":
        return AutoConfig.for_model("llama", vocab_size=128256, rope_theta=500000.0,
                                    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                                      high_freq_factor=4.0,
                                                      original_max_position_embeddings=8192),
                                    **common)
    return AutoConfig.for_model("qwen2", vocab_size=151936, rope_theta=1000000.0, **common)


def packed_batches(steps: int, seqlen: int, vocab: int, seed: int = 0, device="cuda"):
    """(input ids, labels, position ids) rows of documents of 256 to 2048 tokens."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        lengths = []
        while sum(lengths) < seqlen:
            lengths.append(min(int(torch.randint(256, 2049, (1,), generator=g)), seqlen - sum(lengths)))
        ids = torch.randint(0, vocab, (1, seqlen), generator=g)
        positions = torch.cat([torch.arange(n) for n in lengths])[None]
        labels = ids.clone()
        labels[positions == 0] = -100  # a document's first token is not predicted from the last
        batches.append(tuple(t.to(device) for t in (ids, labels, positions)))
    return batches


def build_stack(name: str, base, model_name: str):
    """A copy of `base` prepared as stack `name`; raises ImportError when its package is missing."""
    model = copy.deepcopy(base)
    compile_it = name.endswith("+ compile")
    if name.startswith("transformers sdpa"):
        model.set_attn_implementation("sdpa")
    elif name == "liger":
        import liger_kernel.transformers as liger

        model.set_attn_implementation("sdpa")
        getattr(liger, f"apply_liger_kernel_to_{model_name}")(model=model)
    elif name == "flash_attention_3":
        import flash_attn_interface  # noqa: F401

        model.set_attn_implementation("flash_attention_3")
    elif name.startswith("tilegrid"):
        import tilegrid.integrations.transformers as tgt

        tgt.apply_tilegrid(model)
    else:
        raise ValueError(f"unknown stack {name!r}")
    step_model = torch.compile(model) if compile_it else model
    return model, step_model


def train_steps(model, step_model, batches) -> tuple[float, int]:
    """Mean ms a timed step and the peak bytes allocated over all steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    model.train()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i, (ids, labels, positions) in enumerate(batches):
        if i == WARMUP:
            torch.cuda.synchronize()
            start.record()
        loss = step_model(input_ids=ids, labels=labels, position_ids=positions, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (len(batches) - WARMUP), torch.cuda.max_memory_allocated()


STACKS = ["transformers sdpa", "transformers sdpa + compile", "liger", "flash_attention_3", "tilegrid",
          "tilegrid + compile"]


def main() -> None:
    declare_inplace_fa3()
    from transformers import AutoModelForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="llama", choices=["llama", "qwen2"])
    parser.add_argument("--seqlens", type=int, nargs="*", default=[4096, 8192])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--stacks", nargs="*", default=STACKS)
    args = parser.parse_args()
    report = harness.Report(f"transformers training step ({args.model})")
    config = model_config(args.model)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to("cuda", torch.bfloat16)
    for seqlen in args.seqlens:
        batches = packed_batches(WARMUP + args.steps, seqlen, config.vocab_size)
        problem = f"{args.model}-1B s{seqlen} packed"
        for name in args.stacks:
            try:
                model, step_model = build_stack(name, base, args.model)
            except ImportError as e:
                report.checks[f"{problem} {name}"] = f"not measured: {type(e).__name__}: {e}"
                continue
            try:
                ms, peak = train_steps(model, step_model, batches)
            except Exception as e:  # a stack that fails is recorded, not hidden
                report.checks[f"{problem} {name}"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
                continue
            finally:
                del model, step_model
                torch.cuda.empty_cache()
            report.add(harness.Result(
                op="training step", problem=problem, system=name, median_ms=ms,
                note=f"mean of {args.steps} steps after {WARMUP} warm-up steps",
                extra={"tokens_per_s": seqlen / (ms * 1e-3), "peak_gib": peak / 2**30}))
            print(f"{problem:24} {name:30} {ms:9.2f} ms  {seqlen / (ms * 1e-3):10.0f} tokens/s  "
                  f"{peak / 2**30:6.2f} GiB", flush=True)
            report.write(args.out)
    report.write(args.out)
    print(report.table())


if __name__ == "__main__":
    main()
