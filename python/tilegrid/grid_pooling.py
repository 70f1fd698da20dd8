"""Max and average pooling of a grid's features over windows, through a kernel map.

A window of kernel_size voxels every stride voxels is a convolution's receptive field: the
coarse grid is source.conv_grid(kernel_size, stride) (for kernel_size = stride, the
coarsened grid), and the ConvolutionPlan's map names each window's active inputs. The
reduction runs over the map's taps in torch (differentiable); every coarse voxel of conv_grid
has at least one active input.
"""

from __future__ import annotations

import torch

from .jagged_tensor import JaggedTensor
from .sparse_conv import ConvolutionPlan, vec3


def _plan(op: str, fine_grid, kernel_size, stride, coarse_grid) -> ConvolutionPlan:
    kernel_size = vec3(f"{op}: kernel_size", kernel_size)
    stride = kernel_size if stride is None else vec3(f"{op}: stride", stride)
    return ConvolutionPlan.from_grid_batch(kernel_size, stride, fine_grid, coarse_grid)


def _features(op: str, fine_grid, data):
    features = data.jdata if isinstance(data, JaggedTensor) else data
    if not isinstance(features, torch.Tensor) or features.shape[0] != fine_grid.total_voxels:
        raise ValueError(
            f"{op}: data must have one row per voxel ({fine_grid.total_voxels}), got "
            f"{list(features.shape) if isinstance(features, torch.Tensor) else type(data).__name__}"
        )
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
    gathered, present = _gather(plan, features)
    total = (gathered * present).sum(0)
    count = present.sum(0).clamp(min=1)
    return JaggedTensor._from_trusted(total / count, plan.target_grid.voxel_offsets), plan.target_grid
