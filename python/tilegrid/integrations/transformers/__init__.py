"""tilegrid for Hugging Face transformers models.

    import tilegrid.integrations.transformers as tgt

    model = AutoModelForCausalLM.from_pretrained(...)   # or from a config
    tgt.apply_tilegrid_to_llama(model)                  # in place; returns the model
    # ... train as before: Trainer, a loop, generate(), save_pretrained() ...

or only the attention, for any model that uses transformers' attention interface:

    tgt.register()                                      # attn_implementation="tilegrid"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="tilegrid")

and, with tilegrid's attention, generation through a paged KV cache of tilegrid's own
(paged_cache.py: page pools, block tables, tg.flash_attn_with_kvcache):

    model.generate(ids, attention_mask=mask, past_key_values=tgt.PagedKVCache(model, page_size=16))

What apply_tilegrid_to_llama (and _mistral, _qwen2, _qwen3) swaps in, keeping the weights
and the checkpoint names (tilegrid.integrations.transformers.layers has the details):

| piece | Llama, Mistral | Qwen2 | Qwen3 |
| --- | --- | --- | --- |
| attention core | tilegrid ("tilegrid" implementation) | same | same |
| Q/K/V projections + RoPE | one product, RoPE in its epilogue | one product, q/k/v biases and RoPE in its epilogue | transformers' (q/k norms) |
| residual additions | in the O and down products' epilogues | same | in torch |
| RMSNorm | tilegrid | tilegrid | tilegrid (q/k norms too) |
| MLP | gate/up product with SwiGLU in its epilogue | same | same |
| loss in training | tg.linear_cross_entropy (no logits) | same | same |

Apply it before building the optimizer: the gate/up and q/k/v weights become new parameters.
"""

from __future__ import annotations

import types

import torch

from .attention import NAME, register, tilegrid_attention_forward
from .causal_lm import causal_lm_loss, fused_causal_lm_forward
from .layers import TilegridAttention, TilegridDecoderLayer, is_hf_rms_norm, rms_norm_from
from .paged_cache import PagedKVCache

__all__ = [
    "AutoTilegridModelForCausalLM", "PagedKVCache", "TilegridAttention", "TilegridDecoderLayer", "apply_tilegrid",
    "apply_tilegrid_to_llama", "apply_tilegrid_to_mistral", "apply_tilegrid_to_qwen2",
    "apply_tilegrid_to_qwen3", "causal_lm_loss", "register", "tilegrid_attention_forward",
]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def _replace_rms_norms(root: torch.nn.Module) -> None:
    """Every transformers RMSNorm under `root` (the model's final norm, Qwen3's q/k norms)
    as tg.nn.RMSNorm on the same weight."""
    for parent in root.modules():
        for name, child in list(parent.named_children()):
            if is_hf_rms_norm(child):
                setattr(parent, name, rms_norm_from(child))


def apply_tilegrid(model: torch.nn.Module, *, attention: bool = True, decoder_layers: bool = True,
                   fuse_qkv_rope: bool = True, fused_linear_cross_entropy: bool = True) -> torch.nn.Module:
    """Patches a transformers Llama, Mistral, Qwen2 or Qwen3 model (the base model or its
    *ForCausalLM) in place with tilegrid's kernels; returns it.

    Args:
        model: The model. Its weights, dtype, device, state_dict() names and save_pretrained()
            output are kept.
        attention: Register tilegrid's attention and select it
            (``model.set_attn_implementation("tilegrid")``).
        decoder_layers: Swap the decoder layers for TilegridDecoderLayer (fused MLP, RMSNorm,
            residuals) and every other RMSNorm for tilegrid's.
        fuse_qkv_rope: Within those layers, Q/K/V and RoPE as one product where the attention
            module allows it (no q/k/v bias, no q/k norm).
        fused_linear_cross_entropy: A *ForCausalLM's training loss by tg.linear_cross_entropy
            (its forward then returns logits=None in training with labels).

    Raises:
        ValueError: a model type other than llama, mistral, qwen2 and qwen3.
    """
    config = model.config
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"apply_tilegrid: model_type must be one of {list(SUPPORTED_MODEL_TYPES)}, "
                         f"got {config.model_type!r}")
    base = getattr(model, "model", model)
    if attention:
        register()
        model.set_attn_implementation(NAME)
    if decoder_layers:
        rotary = base.rotary_emb
        for i, layer in enumerate(base.layers):
            if not isinstance(layer, TilegridDecoderLayer):
                base.layers[i] = TilegridDecoderLayer.from_hf(layer, config, rotary, fuse_qkv_rope)
        _replace_rms_norms(model)
    if fused_linear_cross_entropy and hasattr(model, "lm_head") and hasattr(model, "model"):
        model.forward = types.MethodType(fused_causal_lm_forward, model)
    return model


def _for(model_type: str):
    def apply(model: torch.nn.Module, **options) -> torch.nn.Module:
        if model.config.model_type != model_type:
            raise ValueError(f"apply_tilegrid_to_{model_type}: expected a {model_type!r} model, got "
                             f"model_type {model.config.model_type!r} (apply_tilegrid takes any supported one)")
        return apply_tilegrid(model, **options)

    apply.__name__ = apply.__qualname__ = f"apply_tilegrid_to_{model_type}"
    apply.__doc__ = (f"apply_tilegrid for a {model_type!r} model (refuses another model type); "
                     "the same options.")
    return apply


apply_tilegrid_to_llama = _for("llama")
apply_tilegrid_to_mistral = _for("mistral")
apply_tilegrid_to_qwen2 = _for("qwen2")
apply_tilegrid_to_qwen3 = _for("qwen3")


class AutoTilegridModelForCausalLM:
    """AutoModelForCausalLM whose models come back patched by apply_tilegrid (Liger-Kernel's
    AutoLigerKernelForCausalLM, for tilegrid)."""

    @staticmethod
    def from_pretrained(*args, **kwargs) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        return apply_tilegrid(AutoModelForCausalLM.from_pretrained(*args, **kwargs))

    @staticmethod
    def from_config(config, **kwargs) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        return apply_tilegrid(AutoModelForCausalLM.from_config(config, **kwargs))
