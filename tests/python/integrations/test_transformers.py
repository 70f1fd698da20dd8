"""tilegrid.integrations.transformers against the unpatched transformers model built from the
same config and weights: attention registration (padding, packed sequences, generation), and
apply_tilegrid_to_* (logits, loss, every parameter's gradient, checkpoints, generate()).

bfloat16 and float16 bound: the patched model's error against a float32 copy of the same
weights is at most twice the unpatched 16-bit model's error plus 2 ulps of the largest value
(2 * 2^-8 relative for bfloat16, 2 * 2^-11 for float16): "within the noise" of the model it
replaces.
"""

import copy

import pytest
import torch

from conftest import DEVICES

transformers = pytest.importorskip("transformers")
import tilegrid.integrations.transformers as tgt  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3"]
VOCAB = 256


def tiny_model(model_type: str, device: str, dtype=torch.float32, attn="eager", **overrides):
    options = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                   attention_dropout=0.0)
    options.update(overrides)
    config = AutoConfig.for_model(model_type, **options)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    return model.to(device=device, dtype=dtype)


def grads_by_checkpoint_name(model: torch.nn.Module) -> dict:
    """Every parameter's gradient under its checkpoint name (the state_dict hooks map the
    patched model's packed parameters back to q_proj/k_proj/... and gate_proj/up_proj)."""
    params = list(model.parameters())
    saved = [p.data for p in params]
    try:
        for p in params:
            p.data = p.grad if p.grad is not None else torch.zeros_like(p.data)
        return {k: v.clone() for k, v in model.state_dict().items()}
    finally:
        for p, data in zip(params, saved):
            p.data = data


def loss_and_grads(model, ids, labels):
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=labels)
    out.loss.backward()
    return out.loss.detach().double(), grads_by_checkpoint_name(model)


def assert_within_noise(got, unpatched, exact, what, ulp=2**-8):
    """got (patched) against exact (float32), allowed twice unpatched's error plus 2 ulps
    (bfloat16's by default; float16's is 2^-11)."""
    got, unpatched, exact = got.double(), unpatched.double(), exact.double()
    allowed = 2 * (unpatched - exact).abs().max().item() + 2 * ulp * exact.abs().max().item() + 1e-6
    err = (got - exact).abs().max().item()
    assert err <= allowed, f"{what}: error {err:.3g} > allowed {allowed:.3g}"


# float32 runs on the CPU only: tilegrid's CUDA attention takes float16/bfloat16, as
# FlashAttention's does (and refuses float32 with a TypeError).
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_patched_model_matches_unpatched_float32(model_type):
    device = "cpu"
    reference = tiny_model(model_type, device)
    patched = tgt.apply_tilegrid(copy.deepcopy(reference))
    ids = torch.randint(0, VOCAB, (2, 40), device=device)
    labels = ids.clone()
    labels[0, :7] = -100
    want_loss, want_grads = loss_and_grads(reference, ids, labels)
    loss, grads = loss_and_grads(patched, ids, labels)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    assert sorted(grads) == sorted(want_grads)
    for name, want in want_grads.items():
        torch.testing.assert_close(grads[name], want, rtol=1e-4, atol=1e-5, msg=name)
    reference.eval(), patched.eval()
    with torch.no_grad():
        torch.testing.assert_close(patched(ids).logits, reference(ids).logits, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("dtype, ulp", [(torch.bfloat16, 2**-8), (torch.float16, 2**-11)])
def test_patched_model_within_half_precision_noise(device, model_type, dtype, ulp):
    """The 16-bit path is the fused one: Q/K/V + RoPE in one product (Llama, Mistral, Qwen2
    with its biases), the residuals in the epilogues, the loss by tg.linear_cross_entropy
    without logits; bfloat16 and float16 alike."""
    exact = tiny_model(model_type, device)
    unpatched = copy.deepcopy(exact).to(dtype)
    patched = tgt.apply_tilegrid(copy.deepcopy(unpatched))
    ids = torch.randint(0, VOCAB, (2, 48), device=device)
    want_loss, want_grads = loss_and_grads(exact, ids, ids)
    half_loss, half_grads = loss_and_grads(unpatched, ids, ids)
    loss, grads = loss_and_grads(patched, ids, ids)
    assert_within_noise(loss, half_loss, want_loss, "loss", ulp)
    for name, want in want_grads.items():
        assert_within_noise(grads[name], half_grads[name], want, f"gradient of {name}", ulp)
    for m in (exact, unpatched, patched):
        m.eval()
    with torch.no_grad():
        assert_within_noise(patched(ids).logits, unpatched(ids).logits, exact(ids).logits, "logits",
                            ulp)


def test_qwen2_attention_takes_the_fused_product_with_its_biases():
    """Qwen2's q/k/v biases go into the fused Q/K/V + RoPE product's epilogue (the 16-bit
    comparisons above check its values); its checkpoint names stay transformers'."""
    model = tiny_model("qwen2", "cpu", torch.bfloat16)
    names = set(model.state_dict())
    tgt.apply_tilegrid_to_qwen2(model)
    attn = model.model.layers[0].self_attn
    assert isinstance(attn, tgt.TilegridAttention) and attn.qkv_bias is not None
    assert set(model.state_dict()) == names


def test_fused_loss_forms_no_logits_in_training_and_counts_items_as_the_trainer_does():
    model = tiny_model("llama", "cpu", torch.bfloat16)
    reference = copy.deepcopy(model)
    tgt.apply_tilegrid_to_llama(model)
    ids = torch.randint(0, VOCAB, (2, 16))
    labels = ids.clone()
    labels[:, :3] = -100
    model.train(), reference.train()
    out = model(ids, labels=labels, num_items_in_batch=torch.tensor(11))
    assert out.logits is None
    want = reference(ids, labels=labels, num_items_in_batch=torch.tensor(11)).loss
    torch.testing.assert_close(out.loss.float(), want.float(), rtol=2e-2, atol=2e-2)
    shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    torch.testing.assert_close(model(ids, shift_labels=shift).loss.float(), reference(ids, labels=labels).loss.float(),
                               rtol=2e-2, atol=2e-2)
    model.eval()
    assert model(ids, labels=labels).logits is not None  # evaluation forms them


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_checkpoints_round_trip_through_save_pretrained(tmp_path, model_type):
    reference = tiny_model(model_type, "cpu")
    patched = tgt.apply_tilegrid(copy.deepcopy(reference))
    patched.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)  # the unpatched class
    want = reference.state_dict()
    got = loaded.state_dict()
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    again = tgt.apply_tilegrid(AutoModelForCausalLM.from_pretrained(tmp_path))
    ids = torch.randint(0, VOCAB, (1, 20))
    again.eval(), patched.eval()
    with torch.no_grad():
        assert torch.equal(again(ids).logits, patched(ids).logits)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_greedy_generation_gives_the_same_tokens(model_type):
    """A batch of prompts of different lengths (left padding), through the KV cache."""
    reference = tiny_model(model_type, "cpu").eval()
    patched = tgt.apply_tilegrid(copy.deepcopy(reference)).eval()
    ids = torch.randint(0, VOCAB, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    mask[2, :9] = 0
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    want = reference.generate(ids, **kw)
    got = patched.generate(ids, **kw)
    assert torch.equal(got, want)


def test_gradient_checkpointing_gives_the_same_gradients():
    model = tgt.apply_tilegrid(tiny_model("llama", "cpu", torch.bfloat16))
    ids = torch.randint(0, VOCAB, (2, 16))
    loss, grads = loss_and_grads(model, ids, ids)
    model.gradient_checkpointing_enable()
    loss_ckpt, grads_ckpt = loss_and_grads(model, ids, ids)
    torch.testing.assert_close(loss_ckpt, loss)
    for name, g in grads.items():
        torch.testing.assert_close(grads_ckpt[name], g, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_registered_attention_handles_padding_and_packed_sequences(device):
    """float32 on the CPU; bfloat16 on CUDA (the CUDA kernels take 16-bit inputs), compared with
    the eager bfloat16 model within a few bfloat16 ulps of logits of order 1."""
    tgt.register()
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tol = dict(rtol=1e-4, atol=1e-5) if device == "cpu" else dict(rtol=2e-2, atol=2e-2)
    model = tiny_model("llama", device, dtype=dtype, attn="eager").eval()
    ids = torch.randint(0, VOCAB, (3, 17), device=device)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    mask[2, 11:] = 0  # right padding too
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        model.set_attn_implementation("tilegrid")
        got = model(ids, attention_mask=mask).logits
        valid = mask.bool()
        torch.testing.assert_close(got[valid], want[valid], **tol)
        # Two documents packed in one row: the same as each on its own.
        positions = torch.cat([torch.arange(7), torch.arange(10)])[None].to(device)
        packed = model(ids[:1], position_ids=positions).logits
        apart = torch.cat([model(ids[:1, :7]).logits, model(ids[:1, 7:]).logits], dim=1)
        torch.testing.assert_close(packed, apart, **tol)
        cu = torch.tensor([0, 7, 17], dtype=torch.int32, device=device)
        flat = model(ids[:1], position_ids=positions, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                     max_length_q=10, max_length_k=10).logits
        torch.testing.assert_close(flat, apart, **tol)


def test_sliding_window_and_softcap_reach_the_kernel():
    tgt.register()
    model = tiny_model("mistral", "cpu", sliding_window=5).eval()
    ids = torch.randint(0, VOCAB, (2, 23))
    with torch.no_grad():
        want = model(ids).logits
        model.set_attn_implementation("tilegrid")
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-4, atol=1e-5)
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    out, _ = tgt.tilegrid_attention_forward(model.model.layers[0].self_attn, q, k, v, None, scaling=0.25,
                                            softcap=3.0)
    q, k, v = q.double(), k.double(), v.double()
    s = 3.0 * torch.tanh(q @ k.transpose(-1, -2) * 0.25 / 3.0)
    s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(out.transpose(1, 2).double(), s.softmax(-1) @ v, rtol=1e-5, atol=1e-5)


def test_unsupported_requests_get_clear_errors():
    model = tiny_model("qwen2", "cpu")
    with pytest.raises(ValueError, match="expected a 'llama' model"):
        tgt.apply_tilegrid_to_llama(model)
    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2,
                                                                 vocab_size=64))
    with pytest.raises(ValueError, match="model_type must be one of"):
        tgt.apply_tilegrid(gpt2)
    q = k = v = torch.randn(1, 2, 4, 8)
    attn = model.model.layers[0].self_attn
    with pytest.raises(NotImplementedError, match="dropout"):
        tgt.tilegrid_attention_forward(attn, q, k, v, None, dropout=0.1)
    with pytest.raises(NotImplementedError, match="learnable_sink"):
        tgt.tilegrid_attention_forward(attn, q, k, v, None, s_aux=torch.zeros(2))
    with pytest.raises(ValueError, match="padding mask"):
        tgt.tilegrid_attention_forward(attn, q, k, v, torch.zeros(1, 1, 4, 4))
