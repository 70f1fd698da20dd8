"""Grids derived from a GridBatch (coarsened, refined, dual, dilated, pruned) and the index
maps and feature transfers between a grid and its coarsened or refined form.

Each is a composition of coordinate arithmetic and the C++ construction and lookups, so it runs
wherever those run. Conventions follow fVDB: a coarse voxel's centre is the centre of the
block of fine voxels it covers; a dual grid's voxels sit at the corners of the primal voxels.
"""

from __future__ import annotations

import itertools
import math
import operator

import torch

from .jagged_tensor import JaggedTensor
from .sparse_conv import vec3


def _factor(name: str, factor) -> torch.Tensor:
    """A positive int or three (each at most 2**31 - 1) as int64 [3]; a float or a bool raises
    a TypeError rather than being truncated."""
    return torch.tensor(vec3(f"{name}: factor", factor), dtype=torch.int64, device="cpu")


# Rows are int32 in the maps and lookups (ConvolutionPlan refuses larger batches), so a
# derived grid is bounded by them; the bound is checked before anything is allocated, so
# refined_grid(10**5) raises at once instead of filling memory with 1e15 offsets.
_MAX_VOXELS = 2**31 - 1


def _offsets(name: str, grid, extent: torch.Tensor) -> torch.Tensor:
    """All integer offsets in [0, extent) per axis, as [n, 3] int32, where grid's voxels times
    n stay within _MAX_VOXELS (the derived grid's candidates)."""
    count = math.prod(int(e) for e in extent)
    if grid.total_voxels * count > _MAX_VOXELS:
        raise ValueError(
            f"{name}: {grid.total_voxels} voxels x {count} offsets each would make "
            f"{grid.total_voxels * count} candidate voxels, more than 2**31 - 1 (rows are int32)")
    ranges = [range(int(e)) for e in extent]
    return torch.tensor(list(itertools.product(*ranges)), dtype=torch.int32, device="cpu").reshape(-1, 3)


def _parents(ijk: JaggedTensor, factor: torch.Tensor) -> JaggedTensor:
    """Coordinates of the coarse voxels (factor per axis) that contain each voxel of ijk."""
    coarse = torch.div(ijk.jdata.long(), factor.to(ijk.jdata.device), rounding_mode="floor")
    return ijk.jagged_like(coarse.to(torch.int32))


def _expand(ijk: JaggedTensor, offsets: torch.Tensor, scale: torch.Tensor) -> JaggedTensor:
    """Each coordinate c of ijk becomes c * scale + o for every offset o (duplicates merged
    by the construction)."""
    device = ijk.jdata.device
    data = ijk.jdata.long()[:, None, :] * scale.to(device) + offsets.long().to(device)[None, :, :]
    limit = torch.iinfo(torch.int32)
    if data.numel() and bool(((data < limit.min) | (data > limit.max)).any()):
        raise ValueError("derived grid: a voxel coordinate leaves the int32 range")
    counts = torch.diff(ijk.joffsets) * offsets.shape[0]
    joffsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return JaggedTensor.from_data_and_offsets(data.reshape(-1, 3).to(torch.int32), joffsets)


def _kept(ijk: JaggedTensor, mask: torch.Tensor, num_grids: int) -> JaggedTensor:
    """The rows of ijk where mask is set, each still in its own grid (a grid may end empty)."""
    counts = torch.bincount(ijk.jidx.long()[mask], minlength=num_grids)
    joffsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return JaggedTensor.from_data_and_offsets(ijk.jdata[mask].contiguous(), joffsets)


def coarsened(grid, factor):
    f = _factor("coarsened_grid", factor)
    ijk = grid.ijk
    coarse = _parents(ijk, f)
    sizes = grid.voxel_sizes * f
    origins = grid.origins + (f - 1) / 2 * grid.voxel_sizes
    return type(grid).from_ijk(coarse, voxel_sizes=sizes.tolist(), origins=origins.tolist())


def refined(grid, factor):
    f = _factor("refined_grid", factor)
    fine = _expand(grid.ijk, _offsets("refined_grid", grid, f), f)
    sizes = grid.voxel_sizes / f
    origins = grid.origins - (f - 1) / (2 * f) * grid.voxel_sizes
    return type(grid).from_ijk(fine, voxel_sizes=sizes.tolist(), origins=origins.tolist())


def dual(grid, exclude_border: bool = False):
    if not isinstance(exclude_border, bool):
        raise TypeError(
            f"dual_grid: exclude_border must be a bool, got {type(exclude_border).__name__}")
    offsets = _offsets("dual_grid", grid, torch.tensor([2, 2, 2], device="cpu"))
    if exclude_border:
        # fVDB's rule, index for index: dual voxel ijk stays only where the primal voxels
        # ijk + {0,1}^3 are all active (the primal grid eroded by its 2x2x2 upper octant), so
        # the result is a subset of the primal coordinates. The block tested is the one whose
        # lowest voxel is ijk, not the 8 voxels around corner ijk (ijk - 1 + {0,1}^3); kept as
        # fVDB has it so that the same grid gives the same coordinates in both libraries.
        ijk = grid.ijk
        n = ijk.jdata.shape[0]
        neighbours = _expand(ijk, offsets, torch.ones(3, dtype=torch.int64, device="cpu"))
        found = grid.ijk_to_index(neighbours).jdata.reshape(n, offsets.shape[0]) >= 0
        corners = _kept(ijk, found.all(1), grid.num_grids)
    else:
        corners = _expand(grid.ijk, offsets, torch.ones(3, dtype=torch.int64, device="cpu"))
    origins = grid.origins - grid.voxel_sizes / 2
    return type(grid).from_ijk(corners, voxel_sizes=grid.voxel_sizes.tolist(), origins=origins.tolist())


def dilated(grid, n: int):
    try:
        if isinstance(n, bool):
            raise TypeError
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"dilated_grid: n must be an int, got {type(n).__name__} ({n!r})") from None
    if not 0 <= n < 2**31:
        raise ValueError(f"dilated_grid: n must be in [0, 2**31 - 1], got {n}")
    shifts = _offsets("dilated_grid", grid, torch.tensor([2 * n + 1] * 3, device="cpu")) - n
    grown = _expand(grid.ijk, shifts, torch.ones(3, dtype=torch.int64, device="cpu"))
    return type(grid).from_ijk(grown, voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())


def pruned(grid, mask):
    data = mask.jdata if isinstance(mask, JaggedTensor) else mask
    if data.dtype != torch.bool or data.shape != (grid.total_voxels,):
        raise ValueError(
            f"pruned_grid: mask must be bool [{grid.total_voxels}], got {data.dtype} {list(data.shape)}"
        )
    kept = _kept(grid.ijk, data, grid.num_grids)
    return type(grid).from_ijk(kept, voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())


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
