"""Losses over JaggedTensors that weigh every tensor of the batch alike: each tensor's mean
first, then the mean over tensors, so that a grid of 200k voxels does not drown one of 2k.

    loss = tg.jagged_binary_cross_entropy_with_logits(logits, occupied)   # a scalar

Torch ops on jdata and the tensor index jidx, so they run and differentiate on any device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .jagged_tensor import JaggedTensor

_REDUCTIONS = ("mean", "per_tensor", "none")


def jagged_binary_cross_entropy_with_logits(input: JaggedTensor, target, reduction: str = "mean"):
    """Binary cross-entropy of logits against targets jagged alike (e.g. an occupancy logit a
    child voxel, one tensor a grid), as torch.nn.functional.binary_cross_entropy_with_logits
    element by element (computed in float32 at least), averaged within each tensor before the
    tensors are averaged.

    Args:
        input: A JaggedTensor of float logits [N, ...].
        target: Targets of input's shape, probabilities in [0, 1] (bool is 0 / 1): a
            JaggedTensor jagged as input, or a tensor [N, ...].
        reduction: "mean" (default): the mean over tensors of each tensor's mean, tensors
            without elements left out (0 when no tensor has one); "per_tensor": float [B],
            each tensor's mean (NaN for a tensor without elements); "none": a JaggedTensor of
            the element losses, jagged as input.

    Returns:
        A scalar, a [B] tensor or a JaggedTensor (see reduction), differentiable in input (and
        in a float target).
    """
    op = "jagged_binary_cross_entropy_with_logits"
    if not isinstance(input, JaggedTensor):
        raise TypeError(f"{op}: input must be a JaggedTensor, got {type(input).__name__}")
    if not input.jdata.is_floating_point():
        raise TypeError(f"{op}: input must hold float logits, got {input.dtype}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if isinstance(target, JaggedTensor):
        if target.joffsets is not input.joffsets and not torch.equal(
                target.joffsets.cpu(), input.joffsets.cpu()):
            raise ValueError(f"{op}: target is jagged unlike input (joffsets differ)")
        target = target.jdata
    if not isinstance(target, torch.Tensor) or target.shape != input.jdata.shape:
        got = list(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"{op}: target must have input's shape {list(input.jdata.shape)}, "
                         f"got {got}")
    if target.device != input.device:
        raise ValueError(f"{op}: target is on {target.device} but input on {input.device}")
    logits = input.jdata
    dtype = torch.promote_types(logits.dtype, torch.float32)
    losses = F.binary_cross_entropy_with_logits(logits.to(dtype), target.to(dtype),
                                                reduction="none")
    if reduction == "none":
        return input.jagged_like(losses.to(logits.dtype))
    rows = losses.reshape(losses.shape[0], math.prod(losses.shape[1:]))
    sums = losses.new_zeros(input.num_tensors).index_add_(0, input.jidx.long(), rows.sum(1))
    counts = torch.diff(input.joffsets).to(dtype) * rows.shape[1]
    means = sums / counts.clamp(min=1)  # clamped, so that an empty tensor's gradient is 0, not NaN
    present = counts > 0
    if reduction == "per_tensor":
        return torch.where(present, means, torch.full_like(means, float("nan")))
    return (means * present).sum() / present.sum().clamp(min=1)
