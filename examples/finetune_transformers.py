"""Trains a Hugging Face transformers Llama with tilegrid's kernels patched in by one call, next
to the same model unpatched, from the same weights and batches, and prints both loss curves.

    python examples/finetune_transformers.py [--device cpu|cuda] [--steps N] [--model-type llama]

    model = AutoModelForCausalLM.from_config(config)       # or .from_pretrained(...)
    tilegrid.integrations.transformers.apply_tilegrid_to_llama(model)
    # the rest is ordinary transformers: model(input_ids, labels=...), save_pretrained(), ...

Data: the Python standard library's .py sources as bytes (a byte-level vocabulary of 256, as
examples/train_llama.py reads them), documents packed into one row a step with position_ids
restarting at each, as transformers' DataCollatorWithFlattening packs them: tilegrid's
attention keeps the documents apart. bfloat16 weights and AdamW. The model is built from a
config (random initialisation), so nothing is downloaded.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_llama import read_corpus  # noqa: E402

import tilegrid.integrations.transformers as tgt  # noqa: E402


def packed_batch(data: torch.Tensor, g: torch.Generator, docs: int, max_len: int, device):
    """`docs` random slices of 32 to max_len bytes packed into one row: input ids, labels (the
    first token of each document has no prediction) and restarting position ids."""
    ids, labels, positions = [], [], []
    for _ in range(docs):
        n = int(torch.randint(32, max_len + 1, (1,), generator=g))
        start = int(torch.randint(0, data.numel() - n, (1,), generator=g))
        doc = data[start:start + n].to(torch.int64)
        ids.append(doc)
        labels.append(torch.cat([torch.tensor([-100]), doc[1:]]))
        positions.append(torch.arange(n))
    return tuple(torch.cat(t)[None].to(device) for t in (ids, labels, positions))


def train(model, data, steps: int, docs: int, max_len: int, device, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        ids, labels, positions = packed_batch(data, g, docs, max_len, device)
        # transformers shifts the labels by one inside its loss: position i predicts labels
        # i + 1, and a document's first token (-100) is not predicted from the one before.
        loss = model(ids, position_ids=positions, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def main() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model-type", default="llama", choices=list(tgt.SUPPORTED_MODEL_TYPES))
    args = parser.parse_args()
    gpu = args.device == "cuda"
    size = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                num_key_value_heads=2) if gpu else dict(hidden_size=64, intermediate_size=128,
                                                         num_hidden_layers=2, num_attention_heads=4,
                                                         num_key_value_heads=2)
    docs, max_len = (16, 512) if gpu else (4, 64)
    config = AutoConfig.for_model(args.model_type, vocab_size=256, max_position_embeddings=4096,
                                  attention_dropout=0.0, **size)
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    reference = reference.to(device=args.device, dtype=torch.bfloat16)
    # Packed rows need attention that keeps documents apart: SDPA gets a block mask from
    # transformers; tilegrid runs the documents as varlen sequences.
    patched = tgt.apply_tilegrid(copy.deepcopy(reference))
    data = read_corpus(limit_bytes=4 << 20)
    curves = {}
    for name, model in (("transformers (SDPA)", reference), ("tilegrid", patched)):
        start = time.perf_counter()
        curves[name] = train(model, data, args.steps, docs, max_len, args.device)
        if gpu:
            torch.cuda.synchronize()
        print(f"{name:22} {time.perf_counter() - start:7.2f} s for {args.steps} steps "
              f"(first run of a process includes warm-up)")
    print("step " + "".join(f"{n:>24}" for n in curves))
    for i in range(0, args.steps, max(1, args.steps // 10)):
        print(f"{i:4d} " + "".join(f"{c[i]:24.4f}" for c in curves.values()))
    last = {n: sum(c[-5:]) / len(c[-5:]) for n, c in curves.items()}
    print("mean of the last 5 losses: " + ", ".join(f"{n} {v:.4f}" for n, v in last.items()))


if __name__ == "__main__":
    main()
