"""Hugging Face decoder layers rebuilt on tilegrid's fused modules, in place and keeping their
weights: the pieces that apply_tilegrid_to_llama and its siblings swap in.

- RMSNorm modules become tg.nn.RMSNorm on the same weight parameter.
- The gated MLP becomes tg.nn.LlamaMLP: gate and up as one product whose epilogue applies the
  activation, the down product's data gradient carrying the activation's backward; its gate and
  up weights become one parameter (interleaved rows) and its down projection is the model's own.
- Attention without q/k norms (Llama, Mistral, and Qwen2 with its q/k/v biases) becomes
  TilegridAttention: Q, K and V as one product with the biases and RoPE in its epilogue, on
  one parameter in the layout that product reads (tg.nn.LlamaAttention's; the biases one
  more), the KV cache updated as transformers does, the core called
  through transformers' attention interface (``config._attn_implementation``), and the output
  projection with the residual added in its epilogue.
- The decoder layer adds each residual in the epilogue of the product before it and each
  residual gradient inside the backward of the norm it bypasses (tg.rms_norm_keep_input), where
  the fused programs run (the CPU, and Hopper in bfloat16 or float16).

state_dict() and load_state_dict() speak transformers' names and layouts (q_proj.weight,
gate_proj.weight, ...), so save_pretrained() writes a checkpoint the unpatched model loads.

The fused Q/K/V product rotates pairs of adjacent dims (2j, 2j + 1) where transformers rotates
dims j and j + head_dim / 2: q and k are computed in that permuted basis, which leaves q k^T
unchanged, and the KV cache holds k in it. A cache filled by an unpatched layer cannot be
continued by a patched one (nor the reverse).
"""

from __future__ import annotations

from typing import Optional

import torch

from ...nn.llama import LlamaAttention as _TgLlamaAttention
from ...nn.llama import LlamaMLP as _TgLlamaMLP
from ...nn.llama import _fused_programs_run_on, _interleave, _LinearAddResidual, _QkvRope, project
from ...nn.rms_norm import RMSNorm
from ...rms_norm import rms_norm_keep_input

try:
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward
except ImportError as e:  # pragma: no cover - the package's extra
    raise ImportError("tilegrid.integrations.transformers needs Hugging Face transformers "
                      "(pip install 'tilegrid[transformers]')") from e


def is_hf_rms_norm(module: torch.nn.Module) -> bool:
    """transformers' RMSNorm modules (LlamaRMSNorm, Qwen3RMSNorm, ...): a `weight` and a
    `variance_epsilon`, named *RMSNorm."""
    return (type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon")
            and isinstance(getattr(module, "weight", None), torch.nn.Parameter))


def rms_norm_from(module: torch.nn.Module) -> RMSNorm:
    """tg.nn.RMSNorm on `module`'s own weight parameter (not a copy) and epsilon."""
    weight = module.weight
    norm = RMSNorm(tuple(weight.shape), eps=float(module.variance_epsilon), device="meta")
    norm.weight = weight
    return norm


_MLP_ACTS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_pytorch_tanh"}


def mlp_from(module: torch.nn.Module, hidden_act: str) -> Optional[_TgLlamaMLP]:
    """tg.nn.LlamaMLP holding `module`'s gate and up weights (interleaved into one parameter)
    and its down projection; None where it does not fit (biases, another activation)."""
    gate, up, down = (getattr(module, n, None) for n in ("gate_proj", "up_proj", "down_proj"))
    if any(not isinstance(m, torch.nn.Linear) for m in (gate, up, down)) or hidden_act not in _MLP_ACTS:
        return None
    if any(m.bias is not None for m in (gate, up, down)):
        return None
    mlp = _TgLlamaMLP(gate.in_features, gate.out_features, hidden_act, device="meta")
    mlp.gate_up_weight = torch.nn.Parameter(_interleave(gate.weight.data, up.weight.data),
                                            requires_grad=gate.weight.requires_grad)
    mlp.down_proj = down
    return mlp


def attention_fits(module: torch.nn.Module) -> bool:
    """Whether TilegridAttention can stand in for `module`: q/k/v/o Linear projections, q, k
    and v all with biases (Qwen2) or none, no q/k norm, an even head dim."""
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    if any(not isinstance(getattr(module, n, None), torch.nn.Linear) for n in names):
        return False
    if len({getattr(module, n).bias is None for n in names[:3]}) != 1:
        return False
    if getattr(module, "q_norm", None) is not None or getattr(module, "k_norm", None) is not None:
        return False
    return getattr(module, "head_dim", 1) % 2 == 0


class TilegridAttention(_TgLlamaAttention):
    """transformers' attention module (its forward's arguments and return) on tilegrid's fused
    Q/K/V + RoPE product; see the module's text. Built from an existing module by
    TilegridAttention.from_hf(module, rotary_embedding)."""

    @classmethod
    def from_hf(cls, module: torch.nn.Module, rotary: torch.nn.Module) -> "TilegridAttention":
        config = module.config
        d = module.head_dim
        q, k, v, o = module.q_proj, module.k_proj, module.v_proj, module.o_proj
        self = cls(q.in_features, q.out_features // d, k.out_features // d, d, device="meta")
        self.qkv_weight = torch.nn.Parameter(self._pack(q.weight.data, k.weight.data, v.weight.data),
                                             requires_grad=q.weight.requires_grad)
        self.qkv_bias = (None if q.bias is None else
                         torch.nn.Parameter(self._pack(q.bias.data, k.bias.data, v.bias.data),
                                            requires_grad=q.bias.requires_grad))
        self.o_proj = o
        self.config, self.layer_idx = config, module.layer_idx
        self.scaling = module.scaling
        self.is_causal = getattr(module, "is_causal", True)
        self.attention_dropout = getattr(module, "attention_dropout", 0.0)
        self.num_key_value_groups = self.num_heads // self.num_kv_heads  # eager attention reads it
        # Mistral keeps its window in the config, Qwen2 on the module (None on full layers).
        self.sliding_window = (module.sliding_window if hasattr(module, "sliding_window")
                               else getattr(config, "sliding_window", None))
        # The model's rotary embedding, read at each call (dynamic RoPE updates its inv_freq);
        # kept out of the module tree so that it is neither a submodule nor in state_dict().
        self._rotary = [rotary]
        return self

    def forward(self, hidden_states: torch.Tensor, position_embeddings=None,
                attention_mask: Optional[torch.Tensor] = None, past_key_values=None,
                position_ids: Optional[torch.Tensor] = None, residual: Optional[torch.Tensor] = None,
                **kwargs):
        """transformers' attention forward; with `residual` (hidden_states' shape), the output
        projection adds it in its epilogue. Returns (output, None)."""
        x = hidden_states
        b, s, _ = x.shape
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        scaling = self.scaling
        fused = _fused_programs_run_on(x)
        if fused:
            if position_ids is None:
                raise ValueError("TilegridAttention: position_ids are needed (transformers' decoder "
                                 "layers pass them)")
            rotary = self._rotary[0]
            inv_freq = rotary.inv_freq.to(device=x.device, dtype=torch.float32)
            # cos and sin scaled by a (YaRN, LongRoPE) scale q and k by a: the scores by a^2.
            scaling = scaling * float(rotary.attention_scaling) ** 2
            frequencies = torch.cat([inv_freq.repeat(hq + hkv), inv_freq.new_zeros(hkv * d // 2)])
            positions = position_ids.expand(b, s).reshape(-1).to(torch.int64).contiguous()
            rows = x.reshape(b * s, -1).contiguous()
            q, k, v = _QkvRope.apply(rows, self.qkv_weight, self.qkv_bias, positions, frequencies,
                                     inv_freq, self._widths())
            q, k, v = q.view(b, s, hq, d), k.view(b, s, hkv, d), v.view(b, s, hkv, d)
        else:
            if position_embeddings is None:
                raise ValueError("TilegridAttention: position_embeddings (cos, sin) are needed off the "
                                 "fused path (transformers' decoder layers pass them)")
            q, k, v = self._project_qkv(x)
            q, k, v = q.view(b, s, hq, d), k.view(b, s, hkv, d), v.view(b, s, hkv, d)
            cos, sin = (t.unsqueeze(2) for t in position_embeddings)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                          eager_attention_forward)
        out, weights = attention(self, q, k, v, attention_mask,
                                 dropout=0.0 if not self.training else self.attention_dropout,
                                 scaling=scaling, sliding_window=self.sliding_window,
                                 position_ids=position_ids, **kwargs)
        out = out.reshape(b * s, hq * d)
        o = self.o_proj
        if residual is not None and fused and o.bias is None:
            res = residual.reshape(b * s, -1).to(x.dtype)
            return _LinearAddResidual.apply(out.contiguous(), o.weight, res).view(b, s, -1), weights
        out = self._project_out(out).view(b, s, -1)
        return (out if residual is None else residual + out), weights


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class TilegridDecoderLayer(GradientCheckpointingLayer):
    """A pre-norm decoder layer (x + attn(norm(x)), then h + mlp(norm(h))) with transformers'
    forward arguments, on the modules above; the residual additions fused where the fused
    programs run and the attention and MLP are tilegrid's. Built from an existing layer by
    TilegridDecoderLayer.from_hf(layer, config, rotary)."""

    @classmethod
    def from_hf(cls, layer: torch.nn.Module, config, rotary: torch.nn.Module,
                fuse_qkv_rope: bool = True) -> "TilegridDecoderLayer":
        self = cls()
        self.hidden_size = config.hidden_size
        attn = layer.self_attn
        self.self_attn = (TilegridAttention.from_hf(attn, rotary) if fuse_qkv_rope and attention_fits(attn)
                          else attn)
        self.mlp = mlp_from(layer.mlp, getattr(config, "hidden_act", "silu")) or layer.mlp
        self.input_layernorm = rms_norm_from(layer.input_layernorm)
        self.post_attention_layernorm = rms_norm_from(layer.post_attention_layernorm)
        if hasattr(layer, "attention_type"):  # Qwen2/Qwen3 pick their mask by it
            self.attention_type = layer.attention_type
        return self

    def _fuses_residuals(self, x: torch.Tensor) -> bool:
        return (isinstance(self.self_attn, TilegridAttention) and isinstance(self.mlp, _TgLlamaMLP)
                and _fused_programs_run_on(x) and x.shape[-1] % 8 == 0)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None, past_key_values=None,
                use_cache: Optional[bool] = False, position_embeddings=None, **kwargs) -> torch.Tensor:
        x = hidden_states
        attn_args = dict(attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, use_cache=use_cache,
                         position_embeddings=position_embeddings, **kwargs)
        if self._fuses_residuals(x):
            norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
            y, x_res = rms_norm_keep_input(x, norm1.weight, norm1.eps)
            h, _ = self.self_attn(y, residual=x_res, **attn_args)
            z, h_res = rms_norm_keep_input(h, norm2.weight, norm2.eps)
            return self.mlp(z, residual=h_res)
        h = x + self.self_attn(self.input_layernorm(x), **attn_args)[0]
        return h + self.mlp(self.post_attention_layernorm(h))
