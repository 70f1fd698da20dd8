"""Exact attention with FlashAttention's Python interface, forward and backward::

    out = tg.flash_attn_func(q, k, v, causal=True)            # (batch, seqlen, heads, headdim)
    out.sum().backward()                                      # dq, dk, dv
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, return_lse=True)

The signatures are FlashAttention 2's, so code written for it runs unchanged or fails loudly:
`flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
return_attn_probs=False)` and `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
max_seqlen_q, max_seqlen_k, dropout_p=0.0, ...)` with the same keywords after dropout_p.

- What exists: GQA/MQA (heads of q a multiple of heads of k/v); causal masks aligned
  bottom-right when seqlen_q != seqlen_k; window_size=(left, right) in keys around that
  diagonal (-1: unbounded; a window of seqlen_q + seqlen_k or more is unbounded too);
  softcap > 0 (softcap * tanh(s / softcap) on the scaled scores); any head dim from 1 to 256,
  one for q, k and v (padded with zeros to the next of 64, 96, 128, 192, 256, as FA pads to a
  multiple of 8; on Hopper to the next of 64, 128, 256, its kernels' head dims; the default
  scale stays 1/sqrt of the given head dim); inputs copied to a contiguous layout where their
  strides do not suit the kernels, as FA does.
- softmax_scale: None gives 1/sqrt(head_dim), as FA's `if softmax_scale is None`; any other
  value is the scale itself, as in FA: 0.0 weighs every visible key alike and a negative
  scale is accepted (FA takes any float). It must be finite in float32, the type the scores
  are scaled in. On CUDA without softcap, where the kernels need a scale > 0, a negative
  scale runs as -q with -scale and 0.0 as 0 * q with scale 1 (the same scores; autograd
  carries the gradient through the sign or the zero).
- NaN: a NaN among a query's scores (a NaN in q or in a key it sees, or +inf, whose
  softmax is inf / inf) gives that query a NaN output row and lse, and NaN gradients where
  it reaches them, as torch's scaled_dot_product_attention (math backend) gives them. Keys
  outside a query's window are never read (as in FA), so their NaNs do not reach it, where
  the math backend, which multiplies masked probabilities of 0 by them, spreads them.
- What does not: dropout (dropout_p must be 0; anything else raises NotImplementedError),
  alibi_slopes (raises). block_table (paged KV) in the varlen function gathers the pages first.
- return_attn_probs=True returns (out, softmax_lse, None): FA fills the third slot only with
  dropout. return_lse=True (tilegrid's keyword) returns (out, lse). LSE is float32,
  (batch, heads, seqlen_q) or (heads, total_q) for varlen; its gradient is taken into account.
- deterministic=True asks for the same bits on every run; the CPU backward always is.

Backends: CPU tensors (float32, float16, bfloat16) run the reference, forward and backward
(float64 sums). CUDA tensors (float16, bfloat16): the forward runs the portable flash kernel
(sm_80 and newer) or, on Hopper, the TMA + wgmma kernel; the backward, on Hopper at head
dims 64, 128 and 256 (96 and 192 padded to those), TMA + wgmma kernels whose dQ is summed by
float32 bulk additions (the last bits of dq may differ between runs) or, with
deterministic=True, the same kernels with the key tiles adding into each query tile in a
fixed order (the same bits on every run), and everywhere else a portable tensor-core kernel
(mma.sync; the CUDA-core one where the shared memory per block is too small for its tiles,
e.g. sm_86/sm_89) that gives the same bits on every run. On CUDA, the varlen entry points
copy cu_seqlens to the host to validate them, which waits for the current stream. Speeds:
docs/PERFORMANCE.md.
"""

from __future__ import annotations

import math
import numbers
import operator
import reprlib
from typing import Optional

import torch
import torch.nn.functional as F

from . import _C
from ._torch import current_stream, dlpack
from .attention_fp8 import check_fp8, dequantise_dense, dequantise_varlen
from .attention_sinks import apply_learnable_sink, check_learnable_sink
from .paged_kv import gather_paged_kv
from .varlen_used import offsets_of, place_back, used_rows

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_INT64_MAX = 2**63 - 1
_FLOAT32_MAX = torch.finfo(torch.float32).max


def _integer(op: str, name: str, value) -> int:
    """value as a Python int (ints, numpy and torch integers; not bools or floats)."""
    if isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an integer, got a bool ({value})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {type(value).__name__} "
                        f"({value!r})") from None


def _real(op: str, name: str, value) -> float:
    """value as a Python float that is finite in float32, the type the scores are scaled in."""
    if not isinstance(value, (numbers.Real, torch.Tensor, torch.SymFloat)):
        raise TypeError(f"{op}: {name} must be a float, got {type(value).__name__} ({value!r})")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not abs(x) <= _FLOAT32_MAX:
        raise ValueError(f"{op}: {name} must be finite in float32 (|{name}| <= "
                         f"{_FLOAT32_MAX:.4g}), got {value}")
    return x


def _window(op: str, window_size) -> tuple[int, int]:
    """(left, right) as ints >= -1. A window of seqlen_q + seqlen_k or more keys is no window
    (the C++ validation makes it -1), so one past int64 is taken as int64's largest."""
    if window_size is None:
        return -1, -1
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2):
        raise ValueError(f"{op}: window_size must be a pair (left, right), got {window_size!r}")
    # None: that side unbounded, as FlashAttention 4 writes it (-1 in FlashAttention 2 and 3).
    left, right = (-1 if w is None else _integer(op, "window_size", w) for w in window_size)
    if left < -1 or right < -1:
        raise ValueError(f"{op}: window sizes must be >= -1 (-1: unbounded), got ({left}, {right})")
    return min(left, _INT64_MAX), min(right, _INT64_MAX)


def _seqlen(op: str, name: str, value) -> int:
    n = _integer(op, name, value)
    if not 0 <= n <= _INT64_MAX:
        raise ValueError(f"{op}: {name} must be in [0, 2**63 - 1], got {n}")
    return n


def _offsets(op: str, name: str, value) -> torch.Tensor:
    """value itself when it is a tensor; its dtype, shape, device and values are checked by
    the C++ validation. A list or an array would reach the custom op or the binding and fail
    there with a signature dump, so anything else is refused here, naming the argument."""
    if not isinstance(value, torch.Tensor):
        shown = reprlib.repr(value)
        raise TypeError(f"{op}: {name} must be an int32 torch.Tensor of shape (batch + 1,) on q's "
                        f"device, got {type(value).__name__} ({shown})")
    return value


def _check_unsupported(dropout_p, alibi_slopes) -> None:
    if dropout_p is None or not isinstance(dropout_p, (int, float)):
        raise TypeError(
            f"dropout_p must be a float (FlashAttention's fourth positional argument; pass "
            f"softmax_scale by keyword), got {type(dropout_p).__name__}"
        )
    if dropout_p != 0:
        raise NotImplementedError(
            f"tilegrid attention has no dropout yet: dropout_p must be 0.0, got {dropout_p} "
            "(FlashAttention's fourth positional argument is dropout_p; pass softmax_scale by "
            "keyword)"
        )
    if alibi_slopes is not None:
        raise NotImplementedError("tilegrid attention has no ALiBi: alibi_slopes must be None")


def _kernel_ready(x: torch.Tensor) -> torch.Tensor:
    """x itself when the kernels take its layout (last dimension contiguous; on CUDA, strides
    multiples of 8 elements and 16-byte aligned data), else a contiguous copy, as FA copies.
    Under torch.compile only the strides are checked here (Dynamo traces neither data_ptr nor
    storage_offset); the custom ops' bodies run it again on the real tensors, address too."""
    if x.dim() == 0 or x.stride(-1) != 1:
        return x.contiguous()
    if x.is_cuda:
        strides_ok = all(s % 8 == 0 or n == 1 for s, n in zip(x.stride()[:-1], x.shape[:-1]))
        aligned = torch.compiler.is_compiling() or x.data_ptr() % 16 == 0
        if not strides_ok or not aligned:
            return x.contiguous()
    return x


# The head dims whose kernels run on a device, from the C++ side (attention::kernel_head_dims):
# 64, 128 and 256 where Hopper's TMA + wgmma kernels run, forward and backward, so that 96 and
# 192 are padded to 128 and 256 there. That is a third more products than kernels of their own
# would do, on kernels faster than the portable ones (the backward at head dim 256 and 16k
# tokens on an H200: 256-260 TFLOP/s against the portable kernel's 99-101, in
# bench/results/2026-12-04_h200_attention_backward_hd256_dq_after_dkdv.json and
# bench/results/2026-12-02_h200_attention_backward_mma.json). The device alone decides, so
# the padding applies when the portable kernels are requested there too. Elsewhere: 64, 96,
# 128, 192 and 256. A head dim is padded to the next of them.
_HEAD_DIMS_BY_DEVICE: dict[tuple[str, int], tuple[int, ...]] = {}


# Run as written (not traced) under torch.compile, its answer a constant of the graph.
@torch.compiler.assume_constant_result
def _kernel_head_dims(device_type: str, device_index: int) -> tuple[int, ...]:
    key = (device_type, device_index)
    if key not in _HEAD_DIMS_BY_DEVICE:
        _HEAD_DIMS_BY_DEVICE[key] = tuple(_C._attention_kernel_head_dims(device_type, device_index))
    return _HEAD_DIMS_BY_DEVICE[key]


def _padded_head_dim(d: int, device: torch.device) -> int:
    index = 0
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
    for kernel_d in _kernel_head_dims(device.type, index):
        if d <= kernel_d:
            return kernel_d
    raise ValueError(f"flash_attn: head dimension must be at most 256, got {d}")


def _pad_head_dim(x: torch.Tensor, d: int) -> torch.Tensor:
    return x if x.shape[-1] == d else F.pad(x, (0, d - x.shape[-1]))


# ---- the custom ops: forward and backward, dense and variable-length --------------------------


@torch.library.custom_op("tilegrid::flash_attn_forward", mutates_args=())
def flash_attn_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
    window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (_kernel_ready(t) for t in (q, k, v))
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    _C.flash_attn_forward(
        dlpack(q), dlpack(k), dlpack(v), softmax_scale, causal, window_left, window_right, softcap,
        dlpack(out), dlpack(lse), current_stream(q),
    )
    return out, lse


@flash_attn_forward.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap, deterministic):
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)


@torch.library.custom_op("tilegrid::flash_attn_backward", mutates_args=())
def flash_attn_backward(
    dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
    lse: torch.Tensor, dlse: Optional[torch.Tensor], softmax_scale: float, causal: bool,
    window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v, out = (_kernel_ready(t) for t in (q, k, v, out))
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    dlse = None if dlse is None else dlse.contiguous()  # autograd may pass expanded zeros
    _C.flash_attn_backward(
        dlpack(_kernel_ready(dout)), dlpack(q), dlpack(k), dlpack(v), dlpack(out), dlpack(lse),
        dlpack(dlse), softmax_scale, causal, window_left, window_right, softcap, deterministic,
        dlpack(dq), dlpack(dk), dlpack(dv), current_stream(q),
    )
    return dq, dk, dv


@flash_attn_backward.register_fake
def _(dout, q, k, v, out, lse, dlse, softmax_scale, causal, window_left, window_right, softcap,
      deterministic):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


@torch.library.custom_op("tilegrid::flash_attn_varlen_forward", mutates_args=())
def flash_attn_varlen_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
    causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (_kernel_ready(t) for t in (q, k, v))
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=q.device)
    _C.flash_attn_varlen_forward(
        dlpack(q), dlpack(k), dlpack(v), dlpack(cu_seqlens_q), dlpack(cu_seqlens_k), max_seqlen_q,
        max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dlpack(out),
        dlpack(lse), current_stream(q),
    )
    return out, lse


@flash_attn_varlen_forward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, softcap, deterministic):
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty(q.shape[1], q.shape[0], dtype=torch.float32)


@torch.library.custom_op("tilegrid::flash_attn_varlen_backward", mutates_args=())
def flash_attn_varlen_backward(
    dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
    lse: torch.Tensor, dlse: Optional[torch.Tensor], cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
    causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v, out = (_kernel_ready(t) for t in (q, k, v, out))
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    dlse = None if dlse is None else dlse.contiguous()
    _C.flash_attn_varlen_backward(
        dlpack(_kernel_ready(dout)), dlpack(q), dlpack(k), dlpack(v), dlpack(out), dlpack(lse),
        dlpack(dlse), dlpack(cu_seqlens_q), dlpack(cu_seqlens_k), max_seqlen_q, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, softcap, deterministic, dlpack(dq),
        dlpack(dk), dlpack(dv), current_stream(q),
    )
    return dq, dk, dv


@flash_attn_varlen_backward.register_fake
def _(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, causal, window_left, window_right, softcap, deterministic):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


# ---- autograd: the forward ops save what the backward ops read --------------------------------
# `deterministic` is an argument of the forward ops although the forward does not use it, so
# that each call's backward gets its own call's value (also under torch.compile).


def _setup_forward(ctx, inputs, output):
    q, k, v, softmax_scale, causal, window_left, window_right, softcap, deterministic = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.params = (softmax_scale, causal, window_left, window_right, softcap, deterministic)


def _backward_forward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attn_backward(dout, q, k, v, out, lse, dlse, *ctx.params)
    return (dq, dk, dv) + (None,) * 6


flash_attn_forward.register_autograd(_backward_forward, setup_context=_setup_forward)


def _setup_varlen_forward(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, *params = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.lengths = (max_q, max_k)
    ctx.params = tuple(params)  # softmax_scale, causal, window_left, window_right, softcap, det.


def _backward_varlen_forward(ctx, dout, dlse):
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = flash_attn_varlen_backward(
        dout, q, k, v, out, lse, dlse, cu_q, cu_k, *ctx.lengths, *ctx.params
    )
    return (dq, dk, dv) + (None,) * 10


flash_attn_varlen_forward.register_autograd(
    _backward_varlen_forward, setup_context=_setup_varlen_forward
)


# ---- the public functions ----------------------------------------------------------------------


def _positive_scale(q: torch.Tensor, scale: float) -> tuple[torch.Tensor, float]:
    """q and scale with the same scores q.k * scale and scale > 0, for the CUDA kernels without
    softcap (attention.h): -q and -scale for a negative scale, 0 * q and 1 for 0. Exact: a
    negation is exact and 0 * q.k is 0 (NaN where q.k is, as torch's math backend gives it)."""
    if scale < 0:
        return -q, -scale
    if scale == 0:
        return q * 0, 1.0
    return q, scale


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _prepare(q, k, v, softmax_scale, softcap=0.0, op="flash_attn_func"):
    """Kernel-ready, head-dim-padded q, k, v; the scale (of q's head dim when None); v's head
    dim, the output's. Checked before any padding (so that messages give the shapes passed):
    tensors of a dtype the kernels take, one head dim for q and k, one shape but the head dim
    for k and v, head dims from 1 to 256, a scale finite in float32."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 0:
            raise ValueError(f"{op}: {name} must have a head dimension, got a 0-d tensor")
    # Dtypes here, not only in C++: int16 or complex would fail in the DLPack conversion first,
    # naming no argument.
    if q.dtype not in _DTYPES:
        raise TypeError(f"{op}: q must be float16, bfloat16 or float32, got {_dtype_name(q)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: {name} must be {_dtype_name(q)}, got {_dtype_name(t)}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"{op}: k and v must have the same shape but for the head dim, got k "
                         f"{list(k.shape)} and v {list(v.shape)}")
    head_dim = q.shape[-1]
    if k.shape[-1] != head_dim:
        raise ValueError(f"{op}: q and k must have the same head dimension, got q's {head_dim} "
                         f"(q shape {list(q.shape)}) and k's {k.shape[-1]} (k shape "
                         f"{list(k.shape)})")
    v_dim = v.shape[-1]
    if max(head_dim, v_dim) > 256:
        raise ValueError(f"{op}: head dimensions must be at most 256, got q's and k's {head_dim} and "
                         f"v's {v_dim}")
    if min(head_dim, v_dim) < 1:
        raise ValueError(f"{op}: head dimensions must be at least 1, got q's and k's {head_dim} and "
                         f"v's {v_dim}")
    if softmax_scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    else:
        scale = _real(op, "softmax_scale", softmax_scale)
    if q.is_cuda and softcap == 0:
        q, scale = _positive_scale(q, scale)
    # One head dim for the kernels: q, k and v zero-padded to the larger of q's and v's (and up
    # to a kernel's), which changes no score (q.k over zeros adds 0) and only adds output
    # columns that are cut off: a head dim of v's own (MLA: 192 for q and k, 128 for v).
    padded = _padded_head_dim(max(head_dim, v_dim), q.device)
    q, k, v = (_kernel_ready(_pad_head_dim(t, padded)) for t in (q, k, v))
    return q, k, v, scale, v_dim


def _softcap(op: str, softcap) -> float:
    cap = _real(op, "softcap", softcap)
    if cap < 0:
        raise ValueError(f"{op}: softcap must be >= 0 (0: off), got {cap}")
    return cap


def _check_num_splits(op: str, num_splits) -> None:
    """FlashAttention 3's num_splits for flash_attn_func and its varlen form: 1 (no split) or 0
    (the implementation's choice, which here is no split). Split-KV runs in
    flash_attn_with_kvcache, where decoding needs it."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"{op}: num_splits must be an int, got {type(num_splits).__name__}")
    if num_splits < 0:
        raise ValueError(f"{op}: num_splits must be >= 0, got {num_splits}")
    if num_splits > 1:
        raise NotImplementedError(f"{op}: num_splits > 1 (got {num_splits}) is not implemented here; "
                                  "flash_attn_with_kvcache splits the keys (split-KV decoding)")


def check_pack_gqa(op: str, pack_gqa) -> None:
    """FlashAttention 3's pack_gqa: None, True or False. A scheduling choice of FA3's kernels
    (a group's query heads over one K/V tile load); tilegrid's kernels load K/V for each query
    head, so it is checked and changes nothing."""
    if pack_gqa is not None and not isinstance(pack_gqa, bool):
        raise TypeError(f"{op}: pack_gqa must be None, True or False, got {pack_gqa!r}")


def _results(out, lse, head_dim, return_attn_probs, return_lse, sink=None, varlen=False):
    if out.shape[-1] != head_dim:
        out = out[..., :head_dim]
    if sink is not None:
        out, lse = apply_learnable_sink(out, lse, sink, varlen)
    if return_attn_probs:
        return out, lse, None
    return (out, lse) if return_lse else out


def flash_attn_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None, causal: bool = False, window_size=(-1, -1),
    softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False, return_attn_probs: bool = False, *, return_lse: bool = False,
    learnable_sink: Optional[torch.Tensor] = None, q_descale: Optional[torch.Tensor] = None,
    k_descale: Optional[torch.Tensor] = None, v_descale: Optional[torch.Tensor] = None,
    pack_gqa: Optional[bool] = None, num_splits: int = 1,
):
    """Exact attention over (batch, seqlen, heads, headdim) tensors, differentiable in q, k, v.

    FlashAttention 2's ``flash_attn_func``: the same arguments in the same order, so that code
    written for it runs unchanged, or raises where a feature is not implemented.

    Args:
        q: Queries, (batch, seqlen_q, nheads, headdim): float16 or bfloat16 on a CUDA GPU,
            float32, float16 or bfloat16 on the CPU. headdim from 1 to 256.
        k: Keys, (batch, seqlen_k, nheads_k, headdim), q's dtype and device. nheads must be a
            multiple of nheads_k: query head h reads key/value head h // (nheads / nheads_k)
            (multi-query and grouped-query attention).
        v: Values, k's shape, dtype and device, except its head dim, which may differ from
            q's and k's (1 to 256; e.g. 128 under 192 for MLA): the output has v's.
        dropout_p: Dropout probability on the attention weights. Must be 0.0: there is no
            dropout, and any other value raises NotImplementedError.
        softmax_scale: Factor applied to q k^T before the softmax. None: 1 / sqrt(headdim);
            0.0 is a scale of 0 (uniform weights), as in FlashAttention. Must be finite in
            float32.
        causal: Whether to apply a causal mask. With seqlen_q != seqlen_k the mask is aligned
            to the bottom-right corner of the score matrix: query i sees keys
            j <= i + seqlen_k - seqlen_q.
        window_size: (left, right): sliding-window (local) attention; query i sees the keys
            within ``left`` before and ``right`` after its diagonal key i + seqlen_k -
            seqlen_q. -1 leaves that side unbounded; (-1, -1) is full attention. With causal,
            right is 0. None for a side, or for the pair, is -1 (FlashAttention 4's form).
        softcap: If > 0, each scaled score s becomes softcap * tanh(s / softcap) before the
            softmax; 0.0 leaves the scores as they are.
        alibi_slopes: ALiBi slopes. Must be None: ALiBi is not implemented and any tensor
            raises NotImplementedError.
        deterministic: Whether the backward must give the same bits on every run. Only the
            Hopper backward kernels sum dq by float32 bulk additions in the order the key
            tiles finish, so its last bits may differ between runs; with deterministic=True
            they add the key tiles' contributions in a fixed order instead. Every other
            backward (the CPU reference, the portable CUDA kernels) is deterministic either
            way.
        return_attn_probs: Return (out, softmax_lse, None) instead of out. FlashAttention
            fills the third slot only when testing dropout, so it is always None here.
        return_lse: tilegrid's keyword (after the others, keyword only): return
            (out, softmax_lse).
        learnable_sink: FlashAttention 4's keyword (keyword only): None, or one logit a query
            head, a floating (nheads,) tensor on q's device, added to each query's softmax
            denominator as a key with no value (gpt-oss's sinks); differentiable. Applied to
            the kernel's output and log-sum-exp in one elementwise pass
            (tilegrid.attention_sinks); the lse returned then includes the sink.
        q_descale: FlashAttention 3's keyword (keyword only), for q, k and v in
            float8_e4m3fn: None (1), or float32 (batch, nheads_k) factors that dequantise q;
            query head h takes factor [b, h // (nheads / nheads_k)]. The output is bfloat16.
            FP8 is forward-only; on a GPU it runs the bfloat16 kernels on dequantised inputs
            (tilegrid.attention_fp8).
        k_descale: The same for k.
        v_descale: The same for v.
        pack_gqa: FlashAttention 3's keyword (keyword only): None, True or False, whether a
            group's query heads share one K/V tile load. Checked; it changes nothing here,
            where the kernels load K/V for each query head.
        num_splits: FlashAttention 3's keyword (keyword only): 1 (default) or 0 run the keys
            unsplit; more raises NotImplementedError (flash_attn_with_kvcache splits them).

    Returns:
        out, (batch, seqlen_q, nheads, v's headdim) in q's dtype (bfloat16 for float8_e4m3fn
        inputs); or, with return_attn_probs or
        return_lse, out together with softmax_lse, float32 (batch, nheads, seqlen_q): the
        log-sum-exp of each query's scaled scores, whose gradient is taken into account by
        the backward.

    Raises:
        NotImplementedError: dropout_p != 0 or alibi_slopes given; float8_e4m3fn inputs on CUDA
            or asking for a gradient.
        ValueError: shapes, head dims or window sizes that do not fit (the message names the
            argument).
    """
    op = "flash_attn_func"
    _check_unsupported(dropout_p, alibi_slopes)
    check_pack_gqa(op, pack_gqa)
    _check_num_splits(op, num_splits)
    left, right = _window(op, window_size)
    cap = _softcap(op, softcap)
    descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    fp8 = check_fp8(op, q, k, v, descales)
    if fp8:
        q, k, v = dequantise_dense(op, q, k, v, **descales)
    q, k, v, scale, head_dim = _prepare(q, k, v, softmax_scale, cap, op)
    sink = check_learnable_sink(op, learnable_sink, q.shape[2], q.device)
    out, lse = flash_attn_forward(
        q, k, v, scale, bool(causal), left, right, cap, bool(deterministic)
    )
    if fp8:
        out = out.to(torch.bfloat16)
    return _results(out, lse, head_dim, return_attn_probs, return_lse, sink)


def flash_attn_varlen_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None, causal: bool = False, window_size=(-1, -1),
    softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False, return_attn_probs: bool = False, block_table=None, *,
    return_lse: bool = False, learnable_sink: Optional[torch.Tensor] = None,
    seqused_q: Optional[torch.Tensor] = None, seqused_k: Optional[torch.Tensor] = None,
    q_descale: Optional[torch.Tensor] = None, k_descale: Optional[torch.Tensor] = None,
    v_descale: Optional[torch.Tensor] = None, pack_gqa: Optional[bool] = None, num_splits: int = 1,
):
    """Exact attention over variable-length sequences packed one after another, differentiable
    in q, k, v.

    FlashAttention 2's ``flash_attn_varlen_func``: the same arguments in the same order.
    Sequence b's queries are rows cu_seqlens_q[b] to cu_seqlens_q[b + 1] of q, and its keys
    and values rows cu_seqlens_k[b] to cu_seqlens_k[b + 1] of k and v; no sequence attends to
    another.

    Args:
        q: Queries of every sequence, (total_q, nheads, headdim): float16 or bfloat16 on a
            CUDA GPU, float32, float16 or bfloat16 on the CPU. headdim from 1 to 256.
        k: Keys, (total_k, nheads_k, headdim), q's dtype and device; nheads a multiple of
            nheads_k, as in flash_attn_func.
        v: Values, k's shape, dtype and device, except its head dim, which may differ from
            q's and k's (1 to 256; e.g. 128 under 192 for MLA): the output has v's.
        cu_seqlens_q: int32 (batch + 1,) on q's device: where each sequence's queries start
            in q, from 0, non-decreasing, ending at total_q.
        cu_seqlens_k: int32 (batch + 1,): the same for k and v, ending at total_k.
        max_seqlen_q: The longest sequence's number of queries (at least that; a smaller
            value raises).
        max_seqlen_k: The longest sequence's number of keys (at least that).
        dropout_p: Must be 0.0 (no dropout; other values raise NotImplementedError).
        softmax_scale: Factor applied to q k^T before the softmax. None: 1 / sqrt(headdim);
            0.0 is a scale of 0 (uniform weights), as in FlashAttention. Must be finite in
            float32.
        causal: Whether to apply a causal mask, aligned to the bottom-right corner of each
            sequence's score matrix, as in flash_attn_func.
        window_size: (left, right) sliding window around each query's diagonal key, per
            sequence, as in flash_attn_func; (-1, -1) is full attention.
        softcap: If > 0, scores are soft-capped to softcap * tanh(s / softcap); 0.0: off.
        alibi_slopes: Must be None (no ALiBi; a tensor raises NotImplementedError).
        deterministic: Whether the backward must give the same bits on every run, as in
            flash_attn_func.
        return_attn_probs: Return (out, softmax_lse, None) instead of out.
        block_table: None, or a paged KV cache's block table, int32 (batch,
            max_blocks_per_seq): k and v are then page pools (num_blocks, page_block_size,
            nheads_k, headdim), any page size, and sequence b's cu_seqlens_k[b + 1] -
            cu_seqlens_k[b] keys fill its pages block_table[b, 0], [b, 1], ... from slot 0, as
            in FlashAttention. The keys are gathered into packed rows before the kernel
            (tilegrid.paged_kv); differentiable in the pools.
        return_lse: tilegrid's keyword (keyword only): return (out, softmax_lse).
        learnable_sink: None, or a floating (nheads,) tensor: one softmax-denominator logit a
            query head, as in flash_attn_func (FlashAttention 4's keyword).
        seqused_q: FlashAttention 3's keyword (keyword only): None, or int32 (batch,): only
            the first seqused_q[b] queries of sequence b are computed; its other output rows
            are 0 (lse -inf). The used rows are gathered before the kernel (one copy).
        seqused_k: The same for the keys: only the first seqused_k[b] keys of sequence b are
            attended to. With block_table, it may give the key counts instead of
            cu_seqlens_k (pass cu_seqlens_k=None), as FlashAttention 3's paged call does.
        q_descale: FlashAttention 3's keyword (keyword only), for q, k and v in
            float8_e4m3fn: None (1), or float32 (batch, nheads_k) factors, sequence b's rows of
            query head h dequantised by [b, h // (nheads / nheads_k)]. The output is bfloat16.
            Forward-only; on a GPU through the bfloat16 kernels; not with block_table
            (tilegrid.attention_fp8).
        k_descale: The same for k.
        v_descale: The same for v.
        pack_gqa: FlashAttention 3's keyword (keyword only): None, True or False, whether a
            group's query heads share one K/V tile load. Checked; it changes nothing here,
            where the kernels load K/V for each query head.
        num_splits: FlashAttention 3's keyword (keyword only): 1 (default) or 0 run the keys
            unsplit; more raises NotImplementedError (flash_attn_with_kvcache splits them).

    Returns:
        out, (total_q, nheads, v's headdim) in q's dtype (bfloat16 for float8_e4m3fn inputs);
        or, with return_attn_probs or
        return_lse, out together with softmax_lse, float32 (nheads, total_q), whose gradient
        is taken into account by the backward.

    Raises:
        TypeError: cu_seqlens_q or cu_seqlens_k not a tensor (a list, an array) or not int32;
            lengths, windows or scales of the wrong kind. The message names the argument.
        ValueError: shapes, offsets, lengths or window sizes that do not fit.
        NotImplementedError: dropout_p != 0 or alibi_slopes given; float8_e4m3fn inputs on CUDA
            or asking for a gradient.

    On CUDA the offsets are copied to the host to be validated, which waits for the current
    stream.
    """
    op = "flash_attn_varlen_func"
    _check_unsupported(dropout_p, alibi_slopes)
    check_pack_gqa(op, pack_gqa)
    _check_num_splits(op, num_splits)
    left, right = _window(op, window_size)
    cap = _softcap(op, softcap)
    cu_seqlens_q = _offsets(op, "cu_seqlens_q", cu_seqlens_q)
    if not (cu_seqlens_k is None and block_table is not None and seqused_k is not None):
        cu_seqlens_k = _offsets(op, "cu_seqlens_k", cu_seqlens_k)  # else counted from seqused_k
    max_q = _seqlen(op, "max_seqlen_q", max_seqlen_q)
    max_k = _seqlen(op, "max_seqlen_k", max_seqlen_k)
    descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    fp8 = check_fp8(op, q, k, v, descales)
    if fp8:
        if block_table is not None:
            raise NotImplementedError(f"{op}: FP8 inputs with block_table are not implemented; "
                                      "FlashAttention 3 takes them")
        q, k, v = dequantise_varlen(op, q, k, v, cu_seqlens_q, cu_seqlens_k, **descales)
    if block_table is not None:
        if seqused_k is not None:
            # FlashAttention 3's paged call: the key counts by seqused_k, cu_seqlens_k None.
            if cu_seqlens_k is not None:
                raise ValueError(f"{op}: with block_table, give each sequence's keys by cu_seqlens_k or by "
                                 "seqused_k (cu_seqlens_k=None), not both")
            cu_seqlens_k = offsets_of(op, "seqused_k", seqused_k)
            seqused_k = None
        k, v = gather_paged_kv(op, k, v, block_table, cu_seqlens_k)
    used_q = used_rows(op, "seqused_q", seqused_q, cu_seqlens_q)
    used_k = used_rows(op, "seqused_k", seqused_k, cu_seqlens_k)
    total_q = q.shape[0] if isinstance(q, torch.Tensor) and q.dim() > 0 else 0
    if used_q is not None:
        rows_q, cu_seqlens_q, _ = used_q
        q = q[rows_q]
    if used_k is not None:
        rows_k, cu_seqlens_k, _ = used_k
        k, v = k[rows_k], v[rows_k]
    q, k, v, scale, head_dim = _prepare(q, k, v, softmax_scale, cap, op)
    sink = check_learnable_sink(op, learnable_sink, q.shape[1], q.device)
    out, lse = flash_attn_varlen_forward(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, scale, bool(causal), left, right, cap,
        bool(deterministic),
    )
    if fp8:
        out = out.to(torch.bfloat16)
    if used_q is not None:
        out, lse = place_back(out, lse, rows_q, total_q)
    return _results(out, lse, head_dim, return_attn_probs, return_lse, sink, varlen=True)
