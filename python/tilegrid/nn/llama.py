"""A Llama decoder layer whose non-attention work runs in GEMM epilogues: tg.nn.LlamaMLP,
tg.nn.LlamaAttention and tg.nn.LlamaDecoderLayer, with Hugging Face's constructor arguments
and state_dict names, so that a Llama checkpoint's layer loads as it is:

    layer = tg.nn.LlamaDecoderLayer(hidden_size=4096, num_attention_heads=32,
                                    num_key_value_heads=8, intermediate_size=14336)
    layer.load_state_dict(hf_layer.state_dict())   # input_layernorm.weight, self_attn.q_proj.weight, ...
    y = layer(x)                                   # x [batch, seq, hidden], causal

What is fused today (forward and backward):
- the MLP: gate/up as one product whose epilogue stores the pre-activation and applies
  SwiGLU (`store > glu(silu) > store`); in the backward, the down projection's data gradient
  carries SwiGLU's backward in its epilogue (`glu_grad(silu) > store`). The gate and up
  weights are kept interleaved ([g0, u0, g1, u1, ...] rows, one parameter): checkpoints are
  interleaved when they load and split again by state_dict();
- attention's Q, K and V as one product with RoPE in its epilogue (`rope > store`), on one
  parameter that stacks the three weights with the q and k rows in interleaved pairs (the
  epilogue's; Hugging Face's are rotate-half): checkpoints are reordered into it when they
  load and back by state_dict(), so the product reads the parameter as it is and its weight
  gradient is the parameter's; q, k and v come out as column blocks of the product, so their
  gradients arrive apart and the product's gradient is written in one pass: dq and dk rotated
  back into their columns by tg.rope_rotate (a kernel of its own on CUDA), dv copied into its
  columns (on CUDA for bfloat16 and float16 on Hopper; other CUDA GPUs and dtypes take
  tg.linear and torch's RoPE on the three weights in Hugging Face's layout);
- attention is tg.flash_attn_func (forward and backward kernels, causal);
- the residual stream in LlamaDecoderLayer: each addition in the epilogue of the product
  before it (`tile(add) > store` on O and down), and each residual gradient added inside the
  backward kernel of the norm it bypasses (tg.rms_norm_keep_input), so neither makes a pass
  of its own; RMSNorm is tg.nn.RMSNorm's kernel.
Not fused yet: the norms' row statistics (computed by the norm kernel, not in the O and down
products' epilogues).

The fused programs take bfloat16 or float16 and run on Hopper (sm_90a) and, as their
reference, on the CPU. In float32, or on another CUDA GPU, the modules run unfused: the MLP
as torch operations, attention's projections as tg.linear (torch's in float32) with torch's
RoPE.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .. import epilogue
from ..flash_attn import flash_attn_func
from ..gemm import linear, matmul
from ..kernel_choice import hopper_kernels_run_on
from ..rms_norm import rms_norm_keep_input
from ..rope_rotate import rope_rotate
from .rms_norm import RMSNorm


def _down_product(h: torch.Tensor, w: torch.Tensor, residual: Optional[torch.Tensor]):
    """h w^T, plus residual (same dtype, [rows, w.shape[0]]) in the product's epilogue
    (`tile(add) > store`) when one is given."""
    if residual is None:
        return matmul(h, w.t())
    out = h.new_empty(h.shape[0], w.shape[0])
    epilogue.matmul(h, w.t(), epilogue.Program().tile(residual.contiguous()).store(out))
    return out


class _LinearAddResidual(torch.autograd.Function):
    """residual + x w^T with the addition in the product's epilogue; the residual's gradient
    is the output's, passed on without a copy."""

    @staticmethod
    def forward(ctx, x, w, residual):
        ctx.save_for_backward(x, w)
        return _down_product(x, w, residual)

    @staticmethod
    def backward(ctx, dout):
        x, w = ctx.saved_tensors
        dout = dout.to(x.dtype).contiguous()
        dx = matmul(dout, w) if ctx.needs_input_grad[0] else None
        dw = matmul(dout.t(), x) if ctx.needs_input_grad[1] else None
        return dx, dw, dout if ctx.needs_input_grad[2] else None


class _GluMLP(torch.autograd.Function):
    """down(act(gate(x)) * up(x)) [+ residual] with the gate/up product's epilogue doing the
    activation, the down product's the residual addition, and the down product's data
    gradient doing the activation's backward."""

    @staticmethod
    def forward(ctx, x, gate_up, down, act, residual=None):
        pre = x.new_empty(x.shape[0], gate_up.shape[0])
        h = x.new_empty(x.shape[0], gate_up.shape[0] // 2)
        epilogue.matmul(x, gate_up.t(), epilogue.Program().store(pre).glu(act).store(h))
        out = _down_product(h, down, residual)
        ctx.save_for_backward(x, gate_up, down, pre, h)
        ctx.act = act
        return out

    @staticmethod
    def backward(ctx, dout):
        x, gate_up, down, pre, h = ctx.saved_tensors
        dout = dout.to(x.dtype).contiguous()
        dpre = torch.empty_like(pre)
        epilogue.matmul(dout, down, epilogue.Program().glu_grad(pre, ctx.act).store(dpre))
        dx = matmul(dpre, gate_up) if ctx.needs_input_grad[0] else None
        dgate_up = matmul(dpre.t(), x) if ctx.needs_input_grad[1] else None
        ddown = matmul(dout.t(), h) if ctx.needs_input_grad[2] else None
        return dx, dgate_up, ddown, None, dout if ctx.needs_input_grad[4] else None


_TORCH_ACTS = {"silu": F.silu, "gelu_pytorch_tanh": lambda t: F.gelu(t, approximate="tanh")}


def _interleave(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.stack([gate, up], dim=1).reshape(2 * gate.shape[0], gate.shape[1])


class LlamaMLP(torch.nn.Module):
    """Hugging Face's LlamaMLP (gate_proj, up_proj, down_proj; no bias; hidden_act "silu"):
    down_proj(act(gate_proj(x)) * up_proj(x)). state_dict keys: gate_proj.weight,
    up_proj.weight, down_proj.weight.

    The gate and up weights are one parameter, gate_up_weight, with their rows interleaved
    (the layout the gate/up product's epilogue reads); gate_weight and up_weight are views of
    it.

    Args:
        hidden_size: The input's and output's last dimension.
        intermediate_size: The gate and up projections' width.
        hidden_act: "silu" (default) or "gelu_pytorch_tanh".
        mlp_bias: Must be False (Llama's MLP has no bias; True raises NotImplementedError).
        device: The parameters' device.
        dtype: The parameters' dtype.
    """

    _ACTS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str = "silu",
                 mlp_bias: bool = False, device=None, dtype=None):
        super().__init__()
        if hidden_act not in self._ACTS:
            raise ValueError(f"LlamaMLP: hidden_act must be one of {sorted(self._ACTS)}, got {hidden_act!r}")
        if mlp_bias:
            raise NotImplementedError("LlamaMLP: mlp_bias=True is not supported (Llama has no MLP bias)")
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.hidden_act = hidden_act
        gate = torch.nn.Linear(hidden_size, intermediate_size, bias=False, device=device, dtype=dtype)
        up = torch.nn.Linear(hidden_size, intermediate_size, bias=False, device=device, dtype=dtype)
        # Rows [g0, u0, g1, u1, ...]: the layout the glu epilogue reads.
        self.gate_up_weight = torch.nn.Parameter(_interleave(gate.weight.data, up.weight.data))
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, bias=False, device=device,
                                         dtype=dtype)
        self.register_load_state_dict_pre_hook(LlamaMLP._load_hook)
        self.register_state_dict_post_hook(LlamaMLP._save_hook)

    @property
    def gate_weight(self) -> torch.Tensor:
        return self.gate_up_weight[0::2]

    @property
    def up_weight(self) -> torch.Tensor:
        return self.gate_up_weight[1::2]

    @staticmethod
    def _load_hook(module, state_dict, prefix, *args):
        gate, up = prefix + "gate_proj.weight", prefix + "up_proj.weight"
        if gate in state_dict and up in state_dict:
            state_dict[prefix + "gate_up_weight"] = _interleave(state_dict.pop(gate), state_dict.pop(up))

    @staticmethod
    def _save_hook(module, state_dict, prefix, local_metadata):
        w = state_dict.pop(prefix + "gate_up_weight")
        state_dict[prefix + "gate_proj.weight"] = w[0::2].contiguous()
        state_dict[prefix + "up_proj.weight"] = w[1::2].contiguous()

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        """down(act(gate(x)) * up(x)), plus `residual` (x's shape) added in the down product's
        epilogue when given."""
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"LlamaMLP: input's last dimension must be {self.hidden_size}, got shape {list(x.shape)}")
        if residual is not None and residual.shape != x.shape:
            raise ValueError(f"LlamaMLP: residual must have the input's shape {list(x.shape)}, "
                             f"got {list(residual.shape)}")
        if not _fused_programs_run_on(x):
            # float32, or a CUDA GPU other than Hopper: torch's operations, unfused.
            act = _TORCH_ACTS[self.hidden_act]
            h = act(F.linear(x, self.gate_weight)) * F.linear(x, self.up_weight)
            out = F.linear(h, self.down_proj.weight)
            return out if residual is None else residual + out
        rows = x.reshape(-1, self.hidden_size).contiguous()
        res = residual.reshape(-1, self.hidden_size).to(x.dtype) if residual is not None else None
        out = _GluMLP.apply(rows, self.gate_up_weight, self.down_proj.weight, self._ACTS[self.hidden_act],
                            res)
        return out.reshape(*x.shape[:-1], self.hidden_size)


def rotary_frequencies(head_dim: int, theta: float, device) -> torch.Tensor:
    """Hugging Face's default rotary frequencies: theta^(-2j / head_dim), float32 [head_dim / 2]."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype):
    """Hugging Face's default rotary embedding: cos, sin [..., head_dim] for integer positions."""
    inv_freq = rotary_frequencies(head_dim, theta, positions.device)
    angles = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _to_pairs(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """q or k rows (of a weight, or entries of a bias) from Hugging Face's rotate-half heads
    (dims j and j + D/2 rotate together) to interleaved ones (dims 2j and 2j + 1, the
    epilogue's pairs): row h D + t D/2 + j moves to h D + 2j + t. A copy; differentiable."""
    rows = w.reshape(w.shape[0], -1)
    return rows.reshape(-1, 2, head_dim // 2, rows.shape[1]).transpose(1, 2).reshape(w.shape)


def _from_pairs(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """_to_pairs' inverse: interleaved-pair rows back to Hugging Face's rotate-half order."""
    rows = w.reshape(w.shape[0], -1)
    return rows.reshape(-1, head_dim // 2, 2, rows.shape[1]).transpose(1, 2).reshape(w.shape)


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x w^T: tg.linear in bfloat16 and float16, torch's in other dtypes (tg.linear takes
    neither float32 nor float64)."""
    return linear(x, w) if x.dtype in (torch.bfloat16, torch.float16) else F.linear(x, w)


def _fused_programs_run_on(x: torch.Tensor) -> bool:
    """The fused epilogue programs take bfloat16 or float16, and run on the CPU (their
    reference) and where the GEMM's Hopper kernels run."""
    return x.dtype in (torch.bfloat16, torch.float16) and (
        not x.is_cuda or hopper_kernels_run_on("gemm", x.device.index))


class _QkvRope(torch.autograd.Function):
    """q, k, v = x w^T (+ bias) split by columns, with RoPE on the q and k columns (interleaved
    pairs) in the product's epilogue (`rope > store`, or `per_column(add) > rope > store` with
    a bias). The three outputs are column blocks of one buffer, so that the backward receives
    their gradients apart and writes the product's gradient in one pass: dq and dk rotated
    back into their columns (tg.rope_rotate), dv copied into its own; then the two products,
    and the bias's gradient as that gradient's column sums (float32)."""

    @staticmethod
    def forward(ctx, x, w, bias, positions, frequencies, inv_freq, widths):
        out = x.new_empty(x.shape[0], w.shape[0])
        program = epilogue.Program()
        if bias is not None:
            program = program.per_column(bias, "add")
        epilogue.matmul(x, w.t(), program.rope(positions, frequencies).store(out))
        ctx.save_for_backward(x, w, positions, inv_freq)
        ctx.widths = widths
        ctx.set_materialize_grads(False)  # an unused output's gradient is None: zeros below
        nq, nk, _ = widths
        return out[:, :nq], out[:, nq:nq + nk], out[:, nq + nk:]

    @staticmethod
    def backward(ctx, dq, dk, dv):
        x, w, positions, inv_freq = ctx.saved_tensors
        d = x.new_empty(x.shape[0], w.shape[0])
        start = 0
        for grad, width, rotated in zip((dq, dk, dv), ctx.widths, (True, True, False)):
            cols = d[:, start:start + width]
            start += width
            if grad is None:
                cols.zero_()
            elif rotated:
                # The kernel reads rows of any stride but needs unit column steps (an expanded
                # gradient has none).
                grad = grad if grad.stride(-1) == 1 else grad.contiguous()
                rope_rotate(grad.to(d.dtype), positions, inv_freq, inverse=True, out=cols)
            else:
                cols.copy_(grad)
        dx = matmul(d, w) if ctx.needs_input_grad[0] else None
        dw = matmul(d.t(), x) if ctx.needs_input_grad[1] else None
        dbias = d.sum(0, dtype=torch.float32).to(d.dtype) if ctx.needs_input_grad[2] else None
        return dx, dw, dbias, None, None, None, None


class LlamaAttention(torch.nn.Module):
    """Hugging Face's LlamaAttention (q/k/v/o_proj, biases with attention_bias, GQA, rotary
    positions, causal) with the core as tg.flash_attn_func. Input [batch, seq, hidden].
    state_dict keys: q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight (and .bias of
    each with attention_bias).

    The q, k and v projections are one parameter, qkv_weight [(heads + 2 kv_heads) head_dim,
    hidden], in the layout the fused QKV product reads: q's rows, then k's, each head's rows in
    interleaved RoPE pairs (dims 2j and 2j + 1 rotate together, where Hugging Face's
    rotate-half rows pair j with j + head_dim / 2), then v's rows as Hugging Face has them.
    Checkpoints are reordered into it when they load and back by state_dict(), exactly;
    q_weight, k_weight and v_weight are the three in Hugging Face's layout (q and k copies, v a
    view of qkv_weight's rows), differentiable. Attention is the same in the pair basis, since
    q and k share it and v keeps its own.

    Args:
        hidden_size: The input's and output's last dimension.
        num_attention_heads: The number of query heads.
        num_key_value_heads: The number of key and value heads, dividing
            num_attention_heads; None (default): num_attention_heads.
        head_dim: Each head's dimension, even; None (default): hidden_size //
            num_attention_heads.
        rope_theta: The rotary embedding's base; default 10000.0.
        attention_bias: Biases on the q, k, v and o projections (Qwen2 has them on q, k and
            v; Llama's attention_bias puts them on all four); default False. q, k and v's are
            one parameter, qkv_bias, in qkv_weight's row order, added in the fused product's
            epilogue before the rotation.
        device: The parameters' device.
        dtype: The parameters' dtype.
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, num_key_value_heads: Optional[int] = None,
                 head_dim: Optional[int] = None, rope_theta: float = 10000.0, attention_bias: bool = False,
                 device=None, dtype=None):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = num_attention_heads
        self.num_kv_heads = num_key_value_heads or num_attention_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"LlamaAttention: num_attention_heads ({self.num_heads}) must be a multiple "
                             f"of num_key_value_heads ({self.num_kv_heads})")
        self.head_dim = head_dim or hidden_size // num_attention_heads
        if self.head_dim % 2:
            raise ValueError(f"LlamaAttention: head_dim must be even (RoPE rotates pairs of dims), "
                             f"got {self.head_dim}")
        self.rope_theta = rope_theta
        kw = dict(bias=attention_bias, device=device, dtype=dtype)
        q = torch.nn.Linear(hidden_size, self.num_heads * self.head_dim, **kw)
        k = torch.nn.Linear(hidden_size, self.num_kv_heads * self.head_dim, **kw)
        v = torch.nn.Linear(hidden_size, self.num_kv_heads * self.head_dim, **kw)
        self.qkv_weight = torch.nn.Parameter(self._pack(q.weight.data, k.weight.data, v.weight.data))
        # q, k and v's biases as one vector in qkv_weight's row order, or None.
        self.qkv_bias = (torch.nn.Parameter(self._pack(q.bias.data, k.bias.data, v.bias.data))
                         if attention_bias else None)
        self.o_proj = torch.nn.Linear(self.num_heads * self.head_dim, hidden_size, **kw)
        self.register_load_state_dict_pre_hook(LlamaAttention._load_hook)
        self.register_state_dict_post_hook(LlamaAttention._save_hook)

    def _widths(self):
        return (self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim,
                self.num_kv_heads * self.head_dim)

    def _pack(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Hugging Face's q, k, v weights (or biases) as qkv_weight (qkv_bias)."""
        return torch.cat([_to_pairs(q, self.head_dim), _to_pairs(k, self.head_dim), v])

    def _unpack(self, w: torch.Tensor):
        """qkv_weight or qkv_bias (or their gradients) as Hugging Face's q, k, v weights
        (biases)."""
        q, k, v = w.split(self._widths())
        return _from_pairs(q, self.head_dim), _from_pairs(k, self.head_dim), v

    @property
    def q_weight(self) -> torch.Tensor:
        return _from_pairs(self.qkv_weight.split(self._widths())[0], self.head_dim)

    @property
    def k_weight(self) -> torch.Tensor:
        return _from_pairs(self.qkv_weight.split(self._widths())[1], self.head_dim)

    @property
    def v_weight(self) -> torch.Tensor:
        return self.qkv_weight.split(self._widths())[2]

    _HF_PROJECTIONS = ("q_proj", "k_proj", "v_proj")

    @staticmethod
    def _load_hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                   error_msgs):
        hidden = module.qkv_weight.shape[1]
        kinds = [("weight", "qkv_weight", lambda width: (width, hidden))]
        if module.qkv_bias is not None:
            kinds.append(("bias", "qkv_bias", lambda width: (width,)))
        for kind, packed, shape in kinds:
            names = [f"{prefix}{p}.{kind}" for p in LlamaAttention._HF_PROJECTIONS]
            if not all(n in state_dict for n in names):
                continue
            tensors = [state_dict.pop(n) for n in names]
            fits = True
            for name, t, width in zip(names, tensors, module._widths()):
                if t.shape != shape(width):
                    fits = False
                    error_msgs.append(f"size mismatch for {name}: copying a param with shape {t.shape} "
                                      f"from checkpoint, the shape in current model is "
                                      f"{torch.Size(shape(width))}.")
            if fits:
                state_dict[prefix + packed] = module._pack(*tensors)

    @staticmethod
    def _save_hook(module, state_dict, prefix, local_metadata):
        q, k, v = module._unpack(state_dict.pop(prefix + "qkv_weight"))
        # v is a view of the parameter's rows: cloned, so that a saved v holds only its own.
        weights = (q, k, v.clone())
        biases = (None,) * 3
        if prefix + "qkv_bias" in state_dict:
            qb, kb, vb = module._unpack(state_dict.pop(prefix + "qkv_bias"))
            biases = (qb, kb, vb.clone())
        for p, w, b in zip(LlamaAttention._HF_PROJECTIONS, weights, biases):
            state_dict[f"{prefix}{p}.weight"] = w
            if b is not None:
                state_dict[f"{prefix}{p}.bias"] = b
        # Hugging Face's order: q, k, v, then o.
        for name in [n for n in state_dict if n.startswith(prefix + "o_proj.")]:
            state_dict[name] = state_dict.pop(name)

    def forward(self, x: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attention's output projection of x [batch, seq, hidden], plus `residual` (x's
        shape) added in the O product's epilogue when given."""
        b, s, _ = x.shape
        if residual is not None and residual.shape != x.shape:
            raise ValueError(f"LlamaAttention: residual must have the input's shape {list(x.shape)}, "
                             f"got {list(residual.shape)}")
        if position_ids is None:
            position_ids = torch.arange(s, device=x.device).expand(b, s)
        if _fused_programs_run_on(x):
            return self._fused_forward(x, position_ids, residual)
        q, k, v = self._project_qkv(x)
        q = q.view(b, s, self.num_heads, self.head_dim)
        k = k.view(b, s, self.num_kv_heads, self.head_dim)
        v = v.view(b, s, self.num_kv_heads, self.head_dim)
        cos, sin = rotary_cos_sin(position_ids, self.head_dim, self.rope_theta, x.dtype)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = flash_attn_func(q, k, v, causal=True)
        out = self._project_out(out.reshape(b, s, self.num_heads * self.head_dim))
        return out if residual is None else residual + out

    def _project_qkv(self, x: torch.Tensor):
        """q, k and v in Hugging Face's layout, off the fused path (biases added)."""
        biases = self._unpack(self.qkv_bias) if self.qkv_bias is not None else (None,) * 3
        return tuple(project(x, w) if b is None else project(x, w) + b
                     for w, b in zip(self._unpack(self.qkv_weight), biases))

    def _project_out(self, out: torch.Tensor) -> torch.Tensor:
        o = self.o_proj
        return project(out, o.weight) if o.bias is None else project(out, o.weight) + o.bias

    def _fused_forward(self, x: torch.Tensor, position_ids: torch.Tensor,
                       residual: Optional[torch.Tensor]) -> torch.Tensor:
        """Q, K and V as one product with RoPE in its epilogue, on qkv_weight as it is (its q
        and k rows already in interleaved pairs): no copy of the weight in the forward, and its
        gradient is the product's weight gradient."""
        b, s, _ = x.shape
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        inv_freq = rotary_frequencies(d, self.rope_theta, x.device)
        frequencies = torch.cat([inv_freq.repeat(hq + hkv), inv_freq.new_zeros(hkv * d // 2)])
        rows = x.reshape(b * s, -1).contiguous()
        positions = position_ids.expand(b, s).reshape(-1).to(torch.int64).contiguous()  # [1, s] too
        q, k, v = _QkvRope.apply(rows, self.qkv_weight, self.qkv_bias, positions, frequencies, inv_freq,
                                 self._widths())
        out = flash_attn_func(q.view(b, s, hq, d), k.view(b, s, hkv, d), v.view(b, s, hkv, d),
                              causal=True)
        if residual is None or self.o_proj.bias is not None:
            out = self._project_out(out.reshape(b, s, hq * d))
            return out if residual is None else residual + out
        h = _LinearAddResidual.apply(out.reshape(b * s, hq * d), self.o_proj.weight,
                                     residual.reshape(b * s, -1).to(x.dtype))
        return h.view(b, s, -1)


class LlamaDecoderLayer(torch.nn.Module):
    """Hugging Face's pre-norm LlamaDecoderLayer: x + attn(norm(x)), then h + mlp(norm(h)).
    state_dict keys as Hugging Face's: input_layernorm.weight, self_attn.{q,k,v,o}_proj.weight,
    post_attention_layernorm.weight, mlp.{gate,up,down}_proj.weight.

    Args:
        hidden_size: The input's and output's last dimension.
        num_attention_heads: The number of query heads.
        intermediate_size: The MLP's gate and up projections' width.
        num_key_value_heads: The number of key and value heads; None (default):
            num_attention_heads.
        head_dim: Each head's dimension; None (default): hidden_size //
            num_attention_heads.
        rms_norm_eps: The two RMSNorms' eps; default 1e-6.
        rope_theta: The rotary embedding's base; default 10000.0.
        hidden_act: The MLP's activation, "silu" (default) or "gelu_pytorch_tanh".
        device: The parameters' device.
        dtype: The parameters' dtype.
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
                 num_key_value_heads: Optional[int] = None, head_dim: Optional[int] = None,
                 rms_norm_eps: float = 1e-6, rope_theta: float = 10000.0, hidden_act: str = "silu",
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.input_layernorm = RMSNorm(hidden_size, eps=rms_norm_eps, **kw)
        self.self_attn = LlamaAttention(hidden_size, num_attention_heads, num_key_value_heads, head_dim,
                                        rope_theta, **kw)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps=rms_norm_eps, **kw)
        self.mlp = LlamaMLP(hidden_size, intermediate_size, hidden_act, **kw)

    def forward(self, x: torch.Tensor, position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not (_fused_programs_run_on(x) and x.shape[-1] % 8 == 0):
            h = x + self.self_attn(self.input_layernorm(x), position_ids)
            return h + self.mlp(self.post_attention_layernorm(h))
        # The residual stream without a pass of its own: each addition in the epilogue of the
        # product before it (O, down), and each residual gradient added inside the backward
        # of the norm it bypasses.
        norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
        y, x_res = rms_norm_keep_input(x, norm1.weight, norm1.eps)
        h = self.self_attn(y, position_ids, residual=x_res)
        z, h_res = rms_norm_keep_input(h, norm2.weight, norm2.eps)
        return self.mlp(z, residual=h_res)
