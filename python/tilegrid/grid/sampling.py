"""Differentiable trilinear sampling and splatting between points and a GridBatch's voxels, as
torch.library custom ops with fake kernels (torch.compile(fullgraph=True) traces them).

sample: features at points (gradients to the features and to the points); splat: point
values into voxels (gradients to the values). Each is the other's adjoint in the features.

A custom op takes tensors and numbers only, so a grid reaches the ops as a handle: a 0-d
int64 tensor naming the GridBatch in a registry of weak references (register_grid). Being a
tensor, the handle is an input of a compiled graph rather than a constant of it: a new grid
each batch does not recompile the graph.
"""

from __future__ import annotations

import itertools
import weakref

import torch

from .. import _C
from .._torch import current_stream
from .._torch import dlpack_pair as _capsules

_GRIDS: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_NEXT_HANDLE = itertools.count()


def register_grid(grid) -> torch.Tensor:
    """A handle for `grid` (a GridBatch, held weakly): int64 0-d CPU tensor."""
    handle = next(_NEXT_HANDLE)
    _GRIDS[handle] = grid
    return torch.tensor(handle, dtype=torch.int64, device="cpu")


def _impl(op: str, handle: torch.Tensor):
    grid = _GRIDS.get(int(handle))
    if grid is None:
        raise ValueError(f"{op}: the GridBatch of handle {int(handle)} no longer exists")
    return grid._impl


@torch.library.custom_op("tilegrid::grid_sample_trilinear", mutates_args=())
def sample_trilinear(grid: torch.Tensor, points: torch.Tensor, joffsets: torch.Tensor,
                     features: torch.Tensor) -> torch.Tensor:
    """features [total_voxels, C] at points [N, 3] (jagged by joffsets over the grid's batch)."""
    out = features.new_empty(points.shape[0], features.shape[1])
    _C.grid_sample_trilinear(_impl("sample_trilinear", grid), *_capsules(points, joffsets),
                             features.contiguous(), out, current_stream(out))
    return out


@sample_trilinear.register_fake
def _(grid, points, joffsets, features):
    return features.new_empty(points.shape[0], features.shape[1])


@torch.library.custom_op("tilegrid::grid_sample_trilinear_backward_points", mutates_args=())
def sample_trilinear_backward_points(grid: torch.Tensor, points: torch.Tensor,
                                     joffsets: torch.Tensor, features: torch.Tensor,
                                     grad_out: torch.Tensor) -> torch.Tensor:
    grad_points = torch.empty_like(points)
    _C.grid_sample_trilinear_backward_points(
        _impl("sample_trilinear", grid), *_capsules(points, joffsets), features.contiguous(),
        grad_out.contiguous(), grad_points, current_stream(grad_points),
    )
    return grad_points


@sample_trilinear_backward_points.register_fake
def _(grid, points, joffsets, features, grad_out):
    return torch.empty_like(points)


@torch.library.custom_op("tilegrid::grid_splat_trilinear", mutates_args=())
def splat_trilinear(grid: torch.Tensor, total_voxels: int, points: torch.Tensor,
                    joffsets: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """values [N, C] at points spread over the grid's voxels: [total_voxels, C]."""
    out = values.new_empty(total_voxels, values.shape[1])
    _C.grid_splat_trilinear(_impl("splat_trilinear", grid), *_capsules(points, joffsets),
                            values.contiguous(), out, current_stream(out))
    return out


@splat_trilinear.register_fake
def _(grid, total_voxels, points, joffsets, values):
    return values.new_empty(total_voxels, values.shape[1])


def _sample_setup(ctx, inputs, output):
    grid, points, joffsets, features = inputs
    ctx.save_for_backward(grid, points, joffsets, features)


def _sample_backward(ctx, grad_out):
    grid, points, joffsets, features = ctx.saved_tensors
    grad_points = grad_features = None
    if ctx.needs_input_grad[1]:
        grad_points = sample_trilinear_backward_points(grid, points, joffsets, features, grad_out)
    if ctx.needs_input_grad[3]:
        grad_features = splat_trilinear(grid, features.shape[0], points, joffsets,
                                        grad_out.contiguous())
    return None, grad_points, None, grad_features


sample_trilinear.register_autograd(_sample_backward, setup_context=_sample_setup)


def _splat_setup(ctx, inputs, output):
    grid, total_voxels, points, joffsets, values = inputs
    ctx.save_for_backward(grid, points, joffsets)


def _splat_backward(ctx, grad_out):
    grid, points, joffsets = ctx.saved_tensors
    grad_values = None
    if ctx.needs_input_grad[4]:
        grad_values = sample_trilinear(grid, points, joffsets, grad_out.contiguous())
    return None, None, None, None, grad_values


splat_trilinear.register_autograd(_splat_backward, setup_context=_splat_setup)
