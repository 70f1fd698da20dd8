"""Max and average pooling of a grid's features over windows, through a kernel map.

A window of kernel_size voxels every stride voxels is a convolution's receptive field, except
that it starts at o * stride, as fVDB's pooling windows (a convolution's kernel starts
(K - 1) // 2 before: include/tilegrid/grid/convolution.h, TapStart). The coarse grid is
fVDB's, source.coarsened_grid(stride): with kernel_size = stride every coarse voxel's window
holds an active voxel; with wider windows a voxel's window also reaches its neighbours'
blocks, with narrower ones it may hold none, and pools to 0. The ConvolutionPlan's map names
each window's active inputs. Float features (CPU or GPU) run the C++ ops of
tilegrid/grid/pooling.h (custom ops, differentiable: max pooling's gradient goes to the
window's first maximum); other dtypes reduce over the map's taps in torch (there max
pooling's gradient is split between tied maxima, as torch's amax does).
"""

from __future__ import annotations

import math

import torch

from .. import _C
from .._torch import current_stream
from .jagged_tensor import JaggedTensor
from .sparse_conv import ConvolutionPlan, _check_jagged_like, vec3

_FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _use_pool_ops(features: torch.Tensor) -> bool:
    """Whether the C++ pooling ops take these features (see the module text)."""
    return features.dtype in _FLOATS


# ---- the custom ops: [N_in, C] features over a map [taps, N_out] and its inverse --------------


@torch.library.custom_op("tilegrid::max_pool", mutates_args=())
def _max_pool(features: torch.Tensor, kernel_map: torch.Tensor, inverse_map: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(pooled [N_out, C], argmax [N_out, C] int32: the input row of each maximum, -1 where
    the window is empty)."""
    out = features.new_empty(kernel_map.shape[1], features.shape[1])
    argmax = torch.empty(out.shape, dtype=torch.int32, device=features.device)
    _C.max_pool_forward(kernel_map, features, out, argmax, current_stream(features))
    return out, argmax


@_max_pool.register_fake
def _(features, kernel_map, inverse_map):
    out = features.new_empty(kernel_map.shape[1], features.shape[1])
    return out, torch.empty(out.shape, dtype=torch.int32, device=features.device)


@torch.library.custom_op("tilegrid::max_pool_backward", mutates_args=())
def _max_pool_backward(grad_out: torch.Tensor, argmax: torch.Tensor, inverse_map: torch.Tensor
                       ) -> torch.Tensor:
    grad = grad_out.new_empty(inverse_map.shape[1], grad_out.shape[1])
    _C.max_pool_backward(inverse_map, argmax, grad_out, grad, current_stream(grad_out))
    return grad


@_max_pool_backward.register_fake
def _(grad_out, argmax, inverse_map):
    return grad_out.new_empty(inverse_map.shape[1], grad_out.shape[1])


def _max_pool_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1], inputs[2])
    ctx.mark_non_differentiable(output[1])


def _max_pool_grad(ctx, grad_out, _grad_argmax):
    argmax, inverse_map = ctx.saved_tensors
    return _max_pool_backward(grad_out.contiguous(), argmax, inverse_map), None, None


_max_pool.register_autograd(_max_pool_grad, setup_context=_max_pool_setup)


@torch.library.custom_op("tilegrid::avg_pool", mutates_args=())
def _avg_pool(features: torch.Tensor, kernel_map: torch.Tensor, inverse_map: torch.Tensor
              ) -> torch.Tensor:
    out = features.new_empty(kernel_map.shape[1], features.shape[1])
    _C.avg_pool_forward(kernel_map, features, out, current_stream(features))
    return out


@_avg_pool.register_fake
def _(features, kernel_map, inverse_map):
    return features.new_empty(kernel_map.shape[1], features.shape[1])


@torch.library.custom_op("tilegrid::avg_pool_backward", mutates_args=())
def _avg_pool_backward(grad_out: torch.Tensor, kernel_map: torch.Tensor, inverse_map: torch.Tensor
                       ) -> torch.Tensor:
    grad = grad_out.new_empty(inverse_map.shape[1], grad_out.shape[1])
    _C.avg_pool_backward(kernel_map, inverse_map, grad_out, grad, current_stream(grad_out))
    return grad


@_avg_pool_backward.register_fake
def _(grad_out, kernel_map, inverse_map):
    return grad_out.new_empty(inverse_map.shape[1], grad_out.shape[1])


def _avg_pool_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1], inputs[2])


def _avg_pool_grad(ctx, grad_out):
    kernel_map, inverse_map = ctx.saved_tensors
    return _avg_pool_backward(grad_out.contiguous(), kernel_map, inverse_map), None, None


_avg_pool.register_autograd(_avg_pool_grad, setup_context=_avg_pool_setup)


def _pooled_rows(op, plan: ConvolutionPlan, features: torch.Tensor) -> torch.Tensor:
    """The custom op over features viewed as [N, C] (any trailing shape), reshaped back."""
    rows = features.reshape(features.shape[0], math.prod(features.shape[1:])).contiguous()
    out = op(rows, plan.kernel_map, plan.inverse_map)
    out = out[0] if isinstance(out, tuple) else out
    return out.reshape(out.shape[0], *features.shape[1:])


def _plan(op: str, fine_grid, kernel_size, stride, coarse_grid) -> ConvolutionPlan:
    kernel_size = vec3(f"{op}: kernel_size", kernel_size)
    stride = kernel_size if stride is None else vec3(f"{op}: stride", stride)
    from .batch import GridBatch  # batch.py imports this module

    if coarse_grid is not None and not isinstance(coarse_grid, GridBatch):
        raise TypeError(f"{op}: coarse_grid must be a GridBatch or None, got "
                        f"{type(coarse_grid).__name__}")
    if coarse_grid is None:
        # fVDB's: the stride's coarsening, also for windows wider or narrower than the stride
        # (a coarse voxel whose window holds no active voxel pools to 0).
        coarse_grid = fine_grid.coarsened_grid(stride)
    # The maps alone: pooling reads no row order (two sorts on the GPU saved).
    return ConvolutionPlan(kernel_size, stride, fine_grid, coarse_grid, False, _row_orders=False,
                           _pooling=True)


def _features(op: str, fine_grid, data):
    features = data.jdata if isinstance(data, JaggedTensor) else data
    if not isinstance(features, torch.Tensor):
        raise TypeError(f"{op}: data must be a torch.Tensor or JaggedTensor, got {type(data).__name__}")
    if features.dim() == 0 or features.shape[0] != fine_grid.total_voxels:
        raise ValueError(
            f"{op}: data must have one row per voxel ({fine_grid.total_voxels}), got "
            f"{list(features.shape)}"
        )
    if isinstance(data, JaggedTensor):
        _check_jagged_like(op, "data", data, fine_grid.voxel_offsets, "the grid")
    return features


def _gather(plan: ConvolutionPlan, features: torch.Tensor):
    """features of each window's taps, [taps, N_coarse, ...], and which taps are present."""
    present = plan.kernel_map >= 0
    rows = plan.kernel_map.clamp(min=0).long()
    return features[rows], present.view(*present.shape, *([1] * (features.dim() - 1)))


def max_pool(fine_grid, kernel_size, data, stride=None, coarse_grid=None):
    """(pooled features as a JaggedTensor, coarse grid): the largest feature of each window's
    active voxels."""
    features = _features("max_pool", fine_grid, data)
    plan = _plan("max_pool", fine_grid, kernel_size, stride, coarse_grid)
    if _use_pool_ops(features):
        pooled = _pooled_rows(_max_pool, plan, features)
        return JaggedTensor._from_trusted(pooled, plan.target_grid.voxel_offsets), plan.target_grid
    gathered, present = _gather(plan, features)
    lowest = torch.finfo(features.dtype).min if features.is_floating_point() else torch.iinfo(features.dtype).min
    pooled = gathered.masked_fill(~present, lowest).amax(0)
    # A coarse voxel given by the caller may have no active input: zero, as fVDB.
    pooled = pooled.masked_fill(~present.any(0), 0)
    return JaggedTensor._from_trusted(pooled, plan.target_grid.voxel_offsets), plan.target_grid


def avg_pool(fine_grid, kernel_size, data, stride=None, coarse_grid=None):
    """(pooled features, coarse grid): the mean over each window's active voxels."""
    features = _features("avg_pool", fine_grid, data)
    plan = _plan("avg_pool", fine_grid, kernel_size, stride, coarse_grid)
    if _use_pool_ops(features):
        pooled = _pooled_rows(_avg_pool, plan, features)
        return JaggedTensor._from_trusted(pooled, plan.target_grid.voxel_offsets), plan.target_grid
    gathered, present = _gather(plan, features)
    total = (gathered * present).sum(0)
    count = present.sum(0).clamp(min=1)
    return JaggedTensor._from_trusted(total / count, plan.target_grid.voxel_offsets), plan.target_grid
