"""tg.nn.LlamaMLP / LlamaAttention / LlamaDecoderLayer against a Hugging Face-style Llama layer
written here in plain torch (the same state_dict), forward and backward, in float32 math on
the same bfloat16 weights; checkpoints load and save under Hugging Face's names; a small
model of these layers trains. CPU always; the Hopper GPU where there is one."""

import io
import math

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from conftest import HAS_CUDA

HOPPER = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not HOPPER, reason="the fused programs need a compute capability 9.0 GPU")])]

CONFIG = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256)


def reference_layer(sd, x, eps=1e-6, heads=4, kv_heads=2, theta=10000.0):
    """Hugging Face's LlamaDecoderLayer from its state_dict, float32 math."""
    f = {k: v.float() for k, v in sd.items()}
    x = x.float()

    def norm(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * w

    def rot(t):
        h = t.shape[-1] // 2
        return torch.cat([-t[..., h:], t[..., :h]], -1)

    b, s, d = x.shape
    hd = d // heads
    h = norm(x, f["input_layernorm.weight"])
    q = (h @ f["self_attn.q_proj.weight"].T).view(b, s, heads, hd).transpose(1, 2)
    k = (h @ f["self_attn.k_proj.weight"].T).view(b, s, kv_heads, hd).transpose(1, 2)
    v = (h @ f["self_attn.v_proj.weight"].T).view(b, s, kv_heads, hd).transpose(1, 2)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(s).float()[:, None] * inv
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
    x = x + a @ f["self_attn.o_proj.weight"].T
    h = norm(x, f["post_attention_layernorm.weight"])
    m = F.silu(h @ f["mlp.gate_proj.weight"].T) * (h @ f["mlp.up_proj.weight"].T)
    return x + m @ f["mlp.down_proj.weight"].T


def hf_state_dict(dtype=torch.bfloat16):
    d, i, hd = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["hidden_size"] // 4
    w = lambda *shape: (torch.randn(*shape) / math.sqrt(shape[-1])).to(dtype)  # noqa: E731
    return {
        "input_layernorm.weight": (1 + 0.1 * torch.randn(d)).to(dtype),
        "self_attn.q_proj.weight": w(4 * hd, d), "self_attn.k_proj.weight": w(2 * hd, d),
        "self_attn.v_proj.weight": w(2 * hd, d), "self_attn.o_proj.weight": w(d, 4 * hd),
        "post_attention_layernorm.weight": (1 + 0.1 * torch.randn(d)).to(dtype),
        "mlp.gate_proj.weight": w(i, d), "mlp.up_proj.weight": w(i, d), "mlp.down_proj.weight": w(d, i),
    }


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def pair_rows(heads, d):
    """Row i of a q or k block of qkv_weight is Hugging Face's row pair_rows(heads, d)[i]: row
    (h, j, t) of the pair layout (dims 2j and 2j + 1 rotate together) is h D + t D/2 + j of
    rotate-half heads (dims j and j + D/2)."""
    return torch.tensor([h * d + t * d // 2 + j for h in range(heads) for j in range(d // 2) for t in range(2)])


def qkv_to_hf(w, heads, kv_heads, d):
    """qkv_weight (or its gradient) as Hugging Face's q, k, v weights, by pair_rows."""
    q, k, v = w.split([heads * d, kv_heads * d, kv_heads * d])
    hq, hk = torch.empty_like(q), torch.empty_like(k)
    hq[pair_rows(heads, d).to(w.device)] = q
    hk[pair_rows(kv_heads, d).to(w.device)] = k
    return hq, hk, v


def hf_grads(module, heads, kv_heads):
    """A LlamaAttention's or LlamaDecoderLayer's parameter gradients under Hugging Face's names
    and in Hugging Face's layouts."""
    grads = {}
    for name, p in module.named_parameters():
        base = name.rpartition(".")[0] + "." if "." in name else ""
        if name.endswith("gate_up_weight"):
            grads[base + "gate_proj.weight"], grads[base + "up_proj.weight"] = p.grad[0::2], p.grad[1::2]
        elif name.endswith("qkv_weight") or name.endswith("qkv_bias"):
            d = p.shape[0] // (heads + 2 * kv_heads)
            kind = "weight" if name.endswith("qkv_weight") else "bias"
            for n, g in zip("qkv", qkv_to_hf(p.grad, heads, kv_heads, d)):
                grads[f"{base}{n}_proj.{kind}"] = g
        else:
            grads[name] = p.grad
    return grads


def test_checkpoints_load_and_save_under_hugging_face_names():
    sd = hf_state_dict()
    layer = tg.nn.LlamaDecoderLayer(**CONFIG, dtype=torch.bfloat16)
    layer.load_state_dict(sd)
    out = layer.state_dict()
    assert set(out) == set(sd)
    for k in sd:
        assert torch.equal(out[k], sd[k]), k
    # Attention's keys in Hugging Face's order: q, k, v, o.
    assert [k for k in out if k.startswith("self_attn.")] == [f"self_attn.{n}_proj.weight" for n in "qkvo"]
    assert torch.equal(layer.mlp.gate_weight, sd["mlp.gate_proj.weight"])
    assert torch.equal(layer.mlp.up_weight, sd["mlp.up_proj.weight"])
    attn = layer.self_attn
    for n in "qkv":
        assert torch.equal(getattr(attn, f"{n}_weight"), sd[f"self_attn.{n}_proj.weight"]), n
    # One parameter for the three projections: no q_proj / k_proj / v_proj modules.
    assert [n for n, _ in attn.named_parameters()] == ["qkv_weight", "o_proj.weight"]
    assert attn.qkv_weight.shape == (8 * 32, 128)
    # Saved and loaded again, through torch.save, into a fresh layer: the same parameters,
    # bit for bit, and a saved v that holds only its own rows.
    buf = io.BytesIO()
    torch.save(out, buf)
    buf.seek(0)
    again = torch.load(buf)
    assert again["self_attn.v_proj.weight"].untyped_storage().nbytes() == 2 * 32 * 128 * 2
    fresh = tg.nn.LlamaDecoderLayer(**CONFIG, dtype=torch.bfloat16)
    fresh.load_state_dict(again)
    for (name, p), (_, q) in zip(layer.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), name
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, sd[k]), k


def test_checkpoints_of_the_wrong_shapes_are_refused_by_name():
    sd = hf_state_dict()
    sd["self_attn.k_proj.weight"] = sd["self_attn.k_proj.weight"][:-2]
    layer = tg.nn.LlamaDecoderLayer(**CONFIG, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"size mismatch for self_attn\.k_proj\.weight"):
        layer.load_state_dict(sd)


def test_attention_initializes_its_projections_as_linear_layers_do():
    """q, k, v and o drawn as torch.nn.Linear draws them, in that order, so the same seed gives
    the same weights as four Linear layers (q and k stored in pairs order)."""
    torch.manual_seed(5)
    attn = tg.nn.LlamaAttention(64, 4, 2)
    torch.manual_seed(5)
    ref = [torch.nn.Linear(64, n, bias=False) for n in (64, 32, 32)] + [torch.nn.Linear(64, 64, bias=False)]
    got = attn.state_dict()
    for name, lin in zip([f"{n}_proj.weight" for n in "qkvo"], ref):
        assert torch.equal(got[name], lin.weight), name
    assert torch.equal(attn.q_weight, ref[0].weight) and torch.equal(attn.k_weight, ref[1].weight)
    assert torch.equal(attn.v_weight, ref[2].weight)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decoder_layer_matches_the_reference_forward_and_backward(device, dtype):
    sd = hf_state_dict(dtype)
    layer = tg.nn.LlamaDecoderLayer(**CONFIG, dtype=dtype).to(device)
    layer.load_state_dict(sd)
    x = torch.randn(2, 40, CONFIG["hidden_size"]).to(dtype)
    xd = x.to(device).detach().requires_grad_()
    y = layer(xd)
    dy = torch.randn_like(y)
    y.backward(dy)
    # The reference in float32 from the same 16-bit weights and input, with autograd.
    ref_sd = {k: v.float().requires_grad_() for k, v in sd.items()}
    xr = x.detach().float().requires_grad_()
    yr = reference_layer(ref_sd, xr)
    yr.backward(dy.float().cpu())
    # 16-bit storage between the kernels: errors of a few bf16 ulps (2^-8) in norm (float16's
    # are 8x smaller).
    assert rel(y.cpu(), yr) < 2e-2
    assert rel(xd.grad.cpu(), xr.grad) < 4e-2
    ours = hf_grads(layer, 4, 2)
    assert set(ours) == set(ref_sd)  # every parameter, under Hugging Face's names
    for name, g in ours.items():
        assert rel(g.cpu(), ref_sd[name].grad) < 4e-2, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mlp_gradients_against_autograd_of_the_unfused_mlp(device, dtype):
    mlp = tg.nn.LlamaMLP(64, 192, dtype=dtype).to(device)
    x = torch.randn(3, 17, 64, dtype=dtype, device=device, requires_grad=True)
    y = mlp(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    g = mlp.gate_weight.detach().float().requires_grad_()
    u = mlp.up_weight.detach().float().requires_grad_()
    dw = mlp.down_proj.weight.detach().float().requires_grad_()
    xr = x.detach().float().requires_grad_()
    yr = (F.silu(xr @ g.T) * (xr @ u.T)) @ dw.T
    yr.backward(dy.float())
    assert rel(y, yr) < 2e-2 and rel(x.grad, xr.grad) < 3e-2
    assert rel(mlp.gate_up_weight.grad[0::2], g.grad) < 3e-2
    assert rel(mlp.gate_up_weight.grad[1::2], u.grad) < 3e-2
    assert rel(mlp.down_proj.weight.grad, dw.grad) < 3e-2


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="hidden_act"):
        tg.nn.LlamaMLP(64, 128, hidden_act="relu")
    with pytest.raises(ValueError, match="multiple"):
        tg.nn.LlamaAttention(64, num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="even"):
        tg.nn.LlamaAttention(60, num_attention_heads=4, num_key_value_heads=2)
    with pytest.raises(ValueError, match="last dimension"):
        tg.nn.LlamaMLP(64, 128)(torch.randn(2, 32))


@pytest.mark.parametrize("device", DEVICES)
def test_a_small_model_of_these_layers_learns_to_copy(device):
    """Embedding, two decoder layers, a tied head: next-token prediction of sequences that
    repeat their first half, a task only attention solves. The loss on the second half falls."""
    torch.manual_seed(0)
    vocab, d, s = 32, 64, 32
    kw = dict(device=device, dtype=torch.bfloat16)
    emb = torch.nn.Embedding(vocab, d, **kw)
    layers = torch.nn.ModuleList(
        tg.nn.LlamaDecoderLayer(d, 2, 128, num_key_value_heads=2, **kw) for _ in range(2))
    norm = tg.nn.RMSNorm(d, eps=1e-6, **kw)
    params = list(emb.parameters()) + list(layers.parameters()) + list(norm.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3)
    losses = []
    for step in range(60 if device == "cpu" else 150):
        half = torch.randint(0, vocab, (8, s // 2), device=device)
        seq = torch.cat([half, half], 1)
        h = emb(seq)
        for layer in layers:
            h = layer(h)
        logits = norm(h).float() @ emb.weight.float().T
        loss = F.cross_entropy(logits[:, s // 2:-1].reshape(-1, vocab), seq[:, s // 2 + 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-10:]) / 10 < 0.7 * sum(losses[:10]) / 10, losses[::10]


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_traces_the_layer_forward_and_backward(device):
    """fullgraph=True fails on any graph break: the fused programs (tilegrid::matmul_epilogue,
    a custom op mutating its outputs), attention, RMSNorm and the GEMMs all trace."""
    torch.manual_seed(0)
    layer = tg.nn.LlamaDecoderLayer(64, 2, 128, num_key_value_heads=1).to(device, torch.bfloat16)
    x = torch.randn(2, 16, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(lambda x: layer(x).float().square().sum(), backend="aot_eager", fullgraph=True)
    compiled(x).backward()
    got = {n: p.grad.clone() for n, p in layer.named_parameters()}
    gx = x.grad.clone()
    layer.zero_grad()
    x.grad = None
    layer(x).float().square().sum().backward()
    torch.testing.assert_close(gx, x.grad, atol=0, rtol=0)
    for n, p in layer.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=0, rtol=0, msg=n)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
def test_attention_with_position_ids_matches_rotate_half_rope(monkeypatch, device, fused):
    """LlamaAttention against Hugging Face's rotate-half RoPE on the q, k and v weights in
    Hugging Face's layout, with position ids of shape [1, s] (broadcast over the batch, as
    Hugging Face passes them) and [b, s], offsets included; forward and the weights' gradients
    (qkv_weight's mapped back to Hugging Face's rows). Both paths: the fused QKV + RoPE product
    on qkv_weight as it is, and the unfused one (other CUDA GPUs and dtypes: tg.linear on the
    three weights rebuilt from qkv_weight, torch's RoPE), here forced on the CPU."""
    if not fused:
        monkeypatch.setattr(tg.nn.llama, "_fused_programs_run_on", lambda x: False)
    torch.manual_seed(3)
    attn = tg.nn.LlamaAttention(64, 4, 2).to(device, torch.bfloat16)
    x = torch.randn(2, 24, 64, device=device, dtype=torch.bfloat16)
    cases = [torch.arange(24, device=device)[None] + 7,
             torch.stack([torch.arange(24, device=device), torch.arange(24, device=device) * 2 + 5])]
    for position_ids in cases:
        attn.zero_grad()
        y = attn(x, position_ids)
        dy = torch.randn_like(y)
        y.backward(dy)
        got = hf_grads(attn, 4, 2)
        ref = {n: w.float().requires_grad_() for n, w in attn.state_dict().items()}
        assert set(got) == set(ref) == {f"{n}_proj.weight" for n in "qkvo"}
        b, s = x.shape[:2]
        q = (x.float() @ ref["q_proj.weight"].t()).view(b, s, 4, 16)
        k = (x.float() @ ref["k_proj.weight"].t()).view(b, s, 2, 16)
        v = (x.float() @ ref["v_proj.weight"].t()).view(b, s, 2, 16)
        cos, sin = tg.nn.llama.rotary_cos_sin(position_ids.expand(b, s), 16, 10000.0, torch.float32)
        cos, sin = cos[:, :, None], sin[:, :, None]
        q = q * cos + tg.nn.llama._rotate_half(q) * sin
        k = k * cos + tg.nn.llama._rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True).transpose(1, 2)
        want = o.reshape(b, s, 64) @ ref["o_proj.weight"].t()
        want.backward(dy.float())
        assert rel(y.float(), want) < 2e-2
        for n in got:
            assert rel(got[n].float(), ref[n].grad) < 4e-2, n


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
def test_attention_bias_matches_biased_projections(monkeypatch, device, fused):
    """attention_bias=True (Qwen2's q/k/v biases; o's too, as Llama's flag has it): forward and
    every weight's and bias's gradient against a float32 reference on Hugging Face's layouts.
    Fused, the q/k/v biases are added in the product's epilogue before the rotation
    (`per_column(add) > rope > store`); unfused, after the three products."""
    if not fused:
        monkeypatch.setattr(tg.nn.llama, "_fused_programs_run_on", lambda x: False)
    torch.manual_seed(4)
    attn = tg.nn.LlamaAttention(64, 4, 2, attention_bias=True).to(device, torch.bfloat16)
    with torch.no_grad():  # Linear's default biases are small: make them matter
        attn.qkv_bias.normal_(0, 0.5)
        attn.o_proj.bias.normal_(0, 0.5)
    x = torch.randn(2, 24, 64, device=device, dtype=torch.bfloat16)
    position_ids = torch.arange(24, device=device)[None] + 3
    y = attn(x, position_ids)
    dy = torch.randn_like(y)
    y.backward(dy)
    got = hf_grads(attn, 4, 2)
    ref = {n: w.float().requires_grad_() for n, w in attn.state_dict().items()}
    assert set(got) == set(ref) == {f"{n}_proj.{k}" for n in "qkvo" for k in ("weight", "bias")}
    b, s = x.shape[:2]

    def proj(n, heads):
        return (x.float() @ ref[f"{n}_proj.weight"].t() + ref[f"{n}_proj.bias"]).view(b, s, heads, 16)

    q, k, v = proj("q", 4), proj("k", 2), proj("v", 2)
    cos, sin = tg.nn.llama.rotary_cos_sin(position_ids.expand(b, s), 16, 10000.0, torch.float32)
    cos, sin = cos[:, :, None], sin[:, :, None]
    q = q * cos + tg.nn.llama._rotate_half(q) * sin
    k = k * cos + tg.nn.llama._rotate_half(k) * sin
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True, enable_gqa=True).transpose(1, 2)
    want = o.reshape(b, s, 64) @ ref["o_proj.weight"].t() + ref["o_proj.bias"]
    want.backward(dy.float())
    assert rel(y.float(), want) < 2e-2
    for n in got:
        assert rel(got[n].float(), ref[n].grad) < 4e-2, n


def test_attention_bias_checkpoints_round_trip_under_hugging_face_names():
    torch.manual_seed(6)
    attn = tg.nn.LlamaAttention(64, 4, 2, attention_bias=True)
    sd = attn.state_dict()
    assert list(sd) == [f"{n}_proj.{k}" for n in "qkvo" for k in ("weight", "bias")]
    fresh = tg.nn.LlamaAttention(64, 4, 2, attention_bias=True)
    fresh.load_state_dict(sd)
    for (name, p), (_, q) in zip(attn.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), name
    # q's bias entries follow q's rows into the pair layout.
    hq, _, _ = qkv_to_hf(attn.qkv_bias.detach()[:, None], 4, 2, 16)
    assert torch.equal(hq[:, 0], sd["q_proj.bias"])
    sd["k_proj.bias"] = sd["k_proj.bias"][:-2]
    with pytest.raises(RuntimeError, match=r"size mismatch for k_proj\.bias"):
        fresh.load_state_dict(sd)
    # A checkpoint without biases does not load into a module with them (strict).
    with pytest.raises(RuntimeError, match="qkv_bias"):
        fresh.load_state_dict(tg.nn.LlamaAttention(64, 4, 2).state_dict())


def test_qkv_weight_stacks_q_and_k_interleaved_and_v_as_it_is():
    """Loading Hugging Face's q, k and v weights: row (h, j, t) of a q or k head in qkv_weight
    is Hugging Face's row h D + t D/2 + j (dims j and j + D/2 rotate together there, 2j and
    2j + 1 in the epilogue); v's rows keep their order. q_weight, k_weight and v_weight give
    the three back."""
    d, hidden = 16, 8
    attn = tg.nn.LlamaAttention(hidden, 4, 2, head_dim=d)
    q, k, v = torch.randn(4 * d, hidden), torch.randn(2 * d, hidden), torch.randn(2 * d, hidden)
    attn.load_state_dict({"q_proj.weight": q, "k_proj.weight": k, "v_proj.weight": v,
                          "o_proj.weight": torch.randn(hidden, 4 * d)})
    w = attn.qkv_weight
    for name, src, first in (("q", q, 0), ("k", k, 4 * d)):
        for h in range(src.shape[0] // d):
            for j in range(d // 2):
                for t in range(2):
                    assert torch.equal(w[first + h * d + 2 * j + t], src[h * d + t * d // 2 + j]), name
    assert torch.equal(w[6 * d:], v)
    assert torch.equal(attn.q_weight, q) and torch.equal(attn.k_weight, k) and torch.equal(attn.v_weight, v)
    assert all(torch.equal(a, b) for a, b in zip(qkv_to_hf(w, 4, 2, d), (q, k, v)))


def test_an_optimizer_step_moves_each_weight_by_its_own_gradient():
    """SGD on the layer: afterwards its state_dict is exactly the loaded checkpoint minus the
    learning rate times the gradients in Hugging Face's layout (qkv_weight's rows moved with
    their gradients' rows), and the layer matches the reference on its new weights."""
    torch.manual_seed(1)
    sd = hf_state_dict()
    layer = tg.nn.LlamaDecoderLayer(**CONFIG, dtype=torch.bfloat16)
    layer.load_state_dict(sd)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    x = torch.randn(2, 16, CONFIG["hidden_size"]).bfloat16()
    layer(x).float().square().mean().backward()
    grads = hf_grads(layer, 4, 2)
    opt.step()
    after = layer.state_dict()
    for name, w in sd.items():
        assert torch.equal(after[name], w.clone().add_(grads[name], alpha=-0.5)), name
        if name.startswith("self_attn."):
            assert not torch.equal(after[name], w), name
    assert rel(layer(x), reference_layer(after, x)) < 2e-2


def rope_interleaved(p, positions, frequencies):
    """float64: pair j of each row of p rotated by positions * frequencies[j]."""
    angle = positions.double()[:, None] * frequencies.double()[None]
    a, b = p[..., 0::2], p[..., 1::2]
    c, s = angle.cos(), angle.sin()
    return torch.stack([a * c - b * s, a * s + b * c], -1).reshape(p.shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("used", ["qkv", "q", "k", "v", "qk"])
def test_qkv_rope_gradients_when_outputs_go_unused(device, used):
    """The QKV product's backward takes dq, dk and dv apart (an unused output's gradient is
    None, counted as zeros), rotates dq and dk back into their columns of one gradient and
    copies dv beside them: x's and the weight's gradients against float64 autograd through
    interleaved-pair RoPE, for every subset of the outputs in the loss."""
    tokens, hidden, hq, hkv, d = 40, 64, 4, 2, 16
    widths = (hq * d, hkv * d, hkv * d)
    x = torch.randn(tokens, hidden, device=device).bfloat16().requires_grad_()
    w = (torch.randn(sum(widths), hidden, device=device) / hidden**0.5).bfloat16().requires_grad_()
    positions = torch.randint(0, 512, (tokens,), device=device)
    inv_freq = tg.nn.llama.rotary_frequencies(d, 10000.0, device)
    frequencies = torch.cat([inv_freq.repeat(hq + hkv), inv_freq.new_zeros(hkv * d // 2)])
    outs = tg.nn.llama._QkvRope.apply(x, w, None, positions, frequencies, inv_freq, widths)
    assert [tuple(o.shape) for o in outs] == [(tokens, n) for n in widths]
    weights = [torch.randn(tokens, n, device=device) for n in widths]
    loss = sum((o.float() * g).sum() for o, g, name in zip(outs, weights, "qkv") if name in used)
    loss.backward()

    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    ref = rope_interleaved(x64 @ w64.t(), positions, frequencies).split(widths, 1)
    for o, r in zip(outs, ref):
        assert rel(o, r) < 1e-2
    sum((r * g.double()).sum() for r, g, name in zip(ref, weights, "qkv") if name in used).backward()
    assert rel(x.grad, x64.grad) < 2e-2
    assert rel(w.grad, w64.grad) < 2e-2
    # The unused outputs' weight rows get exactly no gradient.
    start = 0
    for n, name in zip(widths, "qkv"):
        if name not in used:
            assert not w.grad[start:start + n].any(), name
        start += n


def test_inductor_compiles_the_layer_on_the_cpu():
    """The default backend too (Inductor generates code around the custom ops): the same
    gradients as eager, to bf16 rounding of the code it fuses around them."""
    torch.manual_seed(0)
    layer = tg.nn.LlamaDecoderLayer(64, 2, 128, num_key_value_heads=1).to(torch.bfloat16)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(lambda x: layer(x).float().square().sum(), fullgraph=True)
    y = compiled(x)
    y.backward()
    gx = x.grad.clone()
    x.grad = None
    want = layer(x).float().square().sum()
    want.backward()
    assert abs(float(y - want)) <= 1e-2 * abs(float(want))
    assert rel(gx, x.grad) < 1e-2
