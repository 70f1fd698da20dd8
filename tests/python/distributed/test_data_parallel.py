"""Data-parallel training of tilegrid's Llama modules through PyTorch's own engines: DDP and
FSDP2 (fully_shard) over 2 CPU processes joined by gloo give the gradients (DDP) and the
parameters after an SGD step (both) of one process training on the whole batch. The modules
need nothing of their own for this: the test is that they compose (state, hooks, the
interleaved gate/up parameter) with both wrappers."""

import copy
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tilegrid as tg


class TinyLlama(torch.nn.Module):
    """Embedding, two tg.nn.LlamaDecoderLayer, tg.nn.RMSNorm, tg.linear_cross_entropy."""

    def __init__(self, vocab=64, hidden=64, heads=2, kv_heads=1, intermediate=128, layers=2):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(
            tg.nn.LlamaDecoderLayer(hidden, heads, intermediate, num_key_value_heads=kv_heads) for _ in range(layers))
        self.norm = tg.nn.RMSNorm(hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return tg.linear_cross_entropy(self.norm(x), self.lm_head.weight, targets)


def _model_and_batch():
    torch.manual_seed(0)
    model = TinyLlama().to(torch.bfloat16)
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.05)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (4, 33), generator=g)
    return model, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _step(model, tokens, targets):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = model(tokens, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    return loss.detach(), grads


def _full_params(model):
    out = {}
    for n, p in model.named_parameters():
        t = p.detach()
        out[n] = t.full_tensor() if hasattr(t, "full_tensor") else t  # FSDP2's DTensor shards
    return out


def _worker(rank, world, init_file, engine):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, tokens, targets = _model_and_batch()
        ref = copy.deepcopy(model)
        ref_loss, ref_grads = _step(ref, tokens, targets)  # one process, the whole batch
        rows = slice(rank * 2, rank * 2 + 2)  # this rank's half (same token count: the mean matches)
        # What this rank alone would compute (no averaging): the measure of how far off a
        # missing or wrong all-reduce would be.
        alone = copy.deepcopy(model)
        _, alone_grads = _step(alone, tokens[rows], targets[rows])
        alone_params = _full_params(alone)

        def rel(a, b):
            return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))

        if engine == "ddp":
            wrapped = torch.nn.parallel.DistributedDataParallel(model)
            _, grads = _step(wrapped, tokens[rows], targets[rows])
            err = {n: rel(grads["module." + n], g) for n, g in ref_grads.items()}
            off = {n: rel(alone_grads[n], g) for n, g in ref_grads.items()}
            assert max(err.values()) < 2e-2, err  # bf16 rounding of the averaged gradients
            assert sum(off.values()) > 10 * sum(err.values()), (err, off)
            got = {n[len("module."):]: p for n, p in _full_params(wrapped).items()}
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh("cpu", (world,))
            for layer in model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            _step(model, tokens[rows], targets[rows])
            got = _full_params(model)
        want = _full_params(ref)
        assert got.keys() == want.keys()
        fresh = {n: p.detach() for n, p in _model_and_batch()[0].named_parameters()}
        # Updates against the one-process run's: the wrapped step's step (got - fresh) is the
        # whole batch's (want - fresh) to bf16 rounding, and far from one rank's own.
        step_err = sum(rel(got[n] - fresh[n], want[n] - fresh[n]) for n in want if not torch.equal(want[n], fresh[n]))
        step_off = sum(rel(alone_params[n] - fresh[n], want[n] - fresh[n]) for n in want
                       if not torch.equal(want[n], fresh[n]))
        moved = sum(not torch.equal(got[n], fresh[n]) for n in want)
        assert moved >= len(want) - 2, moved  # the step moved the wrapped model (a norm weight near 1 may not)
        assert step_off > 5 * step_err, (step_err, step_off)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_two_processes_train_as_one_on_the_whole_batch(engine):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(2, os.path.join(tmp, "init"), engine), nprocs=2, join=True)


def _training_worker(rank, world, init_file, out):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
    import train_llama

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = train_llama.train("cpu", "tiny", 12, with_fp32=False, corpus_limit=1 << 20)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def test_the_training_example_data_parallel_follows_the_one_process_curve():
    """examples/train_llama.py under DDP (2 ranks, each half of every global batch) against one
    process on the whole batches: the same loss curve to bf16 rounding."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
    import train_llama

    one = train_llama.train("cpu", "tiny", 12, with_fp32=False, corpus_limit=1 << 20)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        mp.spawn(_training_worker, args=(2, os.path.join(tmp, "init"), out), nprocs=2, join=True)
        two = torch.load(out)
    assert two["world_size"] == 2 and one["world_size"] == 1
    for name in ("tilegrid_bf16", "torch_bf16"):
        a, b = one["runs"][name]["losses"], two["runs"][name]["losses"]
        assert abs(a[0] - b[0]) < 1e-3, (name, a[0], b[0])  # the same first batch and weights
        assert a[-1] < a[0] - 0.3  # it learns
        assert train_llama.curve_distance(a, b, window=3) < 0.02, name
