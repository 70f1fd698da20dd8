"""bench/bench_transformers_training.py's batches and stacks on the CPU (its timing needs a GPU)."""

import os
import sys

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import bench_transformers_training as bench  # noqa: E402


def test_packed_batches_restart_positions_and_hide_document_starts():
    (ids, labels, positions), = bench.packed_batches(1, 4096, 1000, device="cpu")
    assert ids.shape == labels.shape == positions.shape == (1, 4096)
    starts = (positions[0] == 0).nonzero().flatten()
    assert starts[0] == 0 and len(starts) >= 2
    lengths = torch.diff(torch.cat([starts, torch.tensor([4096])]))
    assert (lengths[:-1] >= 256).all() and (lengths <= 2048).all()
    assert (labels[0, starts] == -100).all() and (labels[positions != 0] == ids[positions != 0]).all()


def test_the_configurations_are_the_named_models():
    llama = bench.model_config("llama")
    assert (llama.hidden_size, llama.num_hidden_layers, llama.vocab_size, llama.num_key_value_heads) == (
        2048, 16, 128256, 8)
    assert llama.rope_scaling["rope_type"] == "llama3"
    assert bench.model_config("qwen2").model_type == "qwen2"


def test_stacks_are_built_or_refused_by_import():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("llama", vocab_size=64, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2)
    base = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.bfloat16)
    model, step_model = bench.build_stack("tilegrid", base, "llama")
    assert model is step_model and model.config._attn_implementation == "tilegrid"
    assert base.config._attn_implementation == "sdpa"  # the base model is left as it was
    ids = torch.randint(0, 64, (1, 8))
    assert torch.isfinite(step_model(input_ids=ids, labels=ids).loss)
    with pytest.raises(ValueError, match="unknown stack"):
        bench.build_stack("nothing", base, "llama")


def test_an_fa3_built_in_place_is_declared_as_the_flash_attn_3_distribution(tmp_path, monkeypatch):
    """transformers maps flash_attn_interface to a distribution named flash-attn-3; a module
    built in place (no distribution) gets one, and an existing mapping is left alone."""
    import importlib.metadata

    (tmp_path / "flash_attn_interface.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = list(sys.path)
    assert "flash_attn_interface" not in importlib.metadata.packages_distributions()
    bench.declare_inplace_fa3()
    try:
        assert importlib.metadata.packages_distributions()["flash_attn_interface"] == ["flash-attn-3"]
        added = [p for p in sys.path if p not in before]
        assert len(added) == 1
        bench.declare_inplace_fa3()  # declared already: nothing more
        assert [p for p in sys.path if p not in before] == added
    finally:
        for p in [p for p in sys.path if p not in before]:
            sys.path.remove(p)
