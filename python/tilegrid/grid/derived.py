"""Grids derived from a GridBatch (coarsened, refined, dual, dilated, pruned) and the index
maps and feature transfers between a grid and its coarsened or refined form.

The grids are C++ ops (include/tilegrid/grid/derived.h), built where the grid lives, which
refuse more than 2**31 - 1 candidate voxels before making any; the feature transfers are torch
compositions over the C++ lookups. Conventions follow fVDB: a coarse voxel's centre is the
centre of the block of fine voxels it covers; a dual grid's voxels sit at the corners of the
primal voxels.
"""

from __future__ import annotations

import operator

import torch

from .. import _C
from .._torch import current_stream, dlpack
from .jagged_tensor import JaggedTensor
from .sparse_conv import vec3


def _factor(name: str, factor) -> list[int]:
    """A positive int or three (each at most 2**31 - 1) as a list of three; a float or a bool
    raises a TypeError rather than being truncated."""
    return list(vec3(f"{name}: factor", factor))


def _parents(ijk: JaggedTensor, factor: list[int]) -> JaggedTensor:
    """Coordinates of the coarse voxels (factor per axis) that contain each voxel of ijk."""
    f = torch.tensor(factor, dtype=torch.int64, device=ijk.jdata.device)
    coarse = torch.div(ijk.jdata.long(), f, rounding_mode="floor")
    return ijk.jagged_like(coarse.to(torch.int32))


def _stream(grid):
    return current_stream(grid.device)


def coarsened(grid, factor):
    f = _factor("coarsened_grid", factor)
    return type(grid)(_C.coarsened_grid(grid._impl, f, _stream(grid)))


def refined(grid, factor):
    f = _factor("refined_grid", factor)
    return type(grid)(_C.refined_grid(grid._impl, f, _stream(grid)))


def dual(grid, exclude_border: bool = False):
    if not isinstance(exclude_border, bool):
        raise TypeError(
            f"dual_grid: exclude_border must be a bool, got {type(exclude_border).__name__}")
    # exclude_border=True keeps fVDB's rule, index for index: dual voxel ijk stays only where
    # the primal voxels ijk + {0,1}^3 are all active (the block whose lowest voxel is ijk, not
    # the 8 voxels around corner ijk), so that the same grid gives the same coordinates in both
    # libraries (include/tilegrid/grid/derived.h).
    return type(grid)(_C.dual_grid(grid._impl, exclude_border, _stream(grid)))


def dilated(grid, n: int):
    try:
        if isinstance(n, bool):
            raise TypeError
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"dilated_grid: n must be an int, got {type(n).__name__} ({n!r})") from None
    if not 0 <= n < 2**31:
        raise ValueError(f"dilated_grid: n must be in [0, 2**31 - 1], got {n}")
    return type(grid)(_C.dilated_grid(grid._impl, n, _stream(grid)))


def pruned(grid, mask):
    data = mask.jdata if isinstance(mask, JaggedTensor) else mask
    if data.dtype != torch.bool or data.shape != (grid.total_voxels,):
        raise ValueError(
            f"pruned_grid: mask must be bool [{grid.total_voxels}], got {data.dtype} {list(data.shape)}"
        )
    if data.device != grid.device:
        raise ValueError(f"pruned_grid: mask is on {data.device} but the grid is on {grid.device}")
    return type(grid)(_C.pruned_grid(grid._impl, dlpack(data.contiguous()), _stream(grid)))


def coarse_index(fine_grid, coarse_grid, factor) -> torch.Tensor:
    """Row in coarse_grid of each fine voxel's parent (-1 if the coarse grid lacks it)."""
    f = _factor("coarse_index", factor)
    ijk = fine_grid.ijk
    parents = _parents(ijk, f)
    return coarse_grid.ijk_to_index(parents, cumulative=True).jdata


def coarsen_features(fine_grid, coarse_grid, features: torch.Tensor, factor, reduce: str) -> torch.Tensor:
    """Features of a fine grid pooled into its coarsened grid ('mean' or 'amax'); differentiable."""
    if reduce not in ("mean", "amax"):
        raise ValueError(f"coarsen_features: reduce must be 'mean' or 'amax', got {reduce!r}")
    if features.shape[0] != fine_grid.total_voxels:
        raise ValueError(
            f"coarsen_features: features must have one row per fine voxel "
            f"({fine_grid.total_voxels}), got {features.shape[0]}"
        )
    index = coarse_index(fine_grid, coarse_grid, factor)
    keep = index >= 0
    src = features[keep]
    target = index[keep].view(-1, *([1] * (features.dim() - 1))).expand_as(src)
    out = features.new_zeros(coarse_grid.total_voxels, *features.shape[1:])
    return out.scatter_reduce(0, target, src, reduce, include_self=False)


def refine_features(coarse_grid, fine_grid, features: torch.Tensor, factor) -> torch.Tensor:
    """Features of a coarse grid copied to each voxel of its refined grid (nearest);
    voxels without a parent get zeros. Differentiable."""
    if features.shape[0] != coarse_grid.total_voxels:
        raise ValueError(
            f"refine_features: features must have one row per coarse voxel "
            f"({coarse_grid.total_voxels}), got {features.shape[0]}"
        )
    index = coarse_index(fine_grid, coarse_grid, factor)
    out = features.new_zeros(fine_grid.total_voxels, *features.shape[1:])
    keep = index >= 0
    return out.index_copy(0, keep.nonzero().flatten(), features[index[keep]])
