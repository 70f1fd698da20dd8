"""Learnable attention sinks: FlashAttention 4's ``learnable_sink`` (as gpt-oss uses them).

A sink is one logit a query head adds to its softmax's denominator, a key with no value:

    out_i = sum_j exp(s_ij) v_j / (sum_j exp(s_ij) + exp(sink_h)),   s = softmax_scale q k^T

(after the softcap, if any). With lse_i = log sum_j exp(s_ij), the kernel's log-sum-exp, that
is the kernel's output times exp(lse_i - lse'_i), lse'_i = logaddexp(lse_i, sink_h): one
elementwise pass over the output after the attention kernel, exact, and differentiable
through the kernel's output and its log-sum-exp (the backward takes lse's gradient). The
log-sum-exp returned is lse', the denominator's, as FlashAttention 4 returns it.
"""

from __future__ import annotations

from typing import Optional

import torch


def check_learnable_sink(op: str, sink, nheads: int, device: torch.device) -> Optional[torch.Tensor]:
    """sink itself when it is None or a floating (nheads,) tensor on `device`, else a clear error."""
    if sink is None:
        return None
    if not isinstance(sink, torch.Tensor):
        raise TypeError(f"{op}: learnable_sink must be a tensor of shape ({nheads},) or None, "
                        f"got {type(sink).__name__}")
    if not sink.is_floating_point() or tuple(sink.shape) != (nheads,):
        raise ValueError(f"{op}: learnable_sink must be a floating tensor of shape ({nheads},) "
                         f"(one logit a query head), got {sink.dtype} of shape {list(sink.shape)}")
    if sink.device != device:
        raise ValueError(f"{op}: learnable_sink must be on q's device {device}, got {sink.device}")
    return sink


def apply_learnable_sink(out: torch.Tensor, lse: torch.Tensor, sink: torch.Tensor,
                         varlen: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of attention with the sink in the softmax's denominator.

    out is (batch, seqlen, nheads, d) with lse (batch, nheads, seqlen), or, with varlen,
    (total, nheads, d) with lse (nheads, total). Computed in float32; out keeps its dtype.
    A query that sees no key (lse -inf) keeps out 0 and gets lse = sink. A sink of -inf is no
    sink; it is clamped to float32's lowest value, so that a query that sees no key and has
    no sink gets lse = that value, not the NaN of logaddexp(-inf, -inf)'s gradient.
    """
    sink = sink.float().clamp_min(torch.finfo(torch.float32).min)
    sink_of_lse = sink[:, None] if varlen else sink[None, :, None]
    new_lse = torch.logaddexp(lse, sink_of_lse)
    kept = torch.exp(lse - new_lse)  # the share of the denominator the keys hold
    kept_of_out = kept.transpose(0, 1)[..., None] if varlen else kept.transpose(1, 2)[..., None]
    return (out.float() * kept_of_out).to(out.dtype), new_lse
