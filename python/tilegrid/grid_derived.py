"""Grids derived from a GridBatch (coarsened, refined, dual, dilated, pruned) and the index
maps and feature transfers between a grid and its coarsened or refined form.

Each is a composition of coordinate arithmetic and the C++ construction and lookups, so it runs
wherever those run. Conventions follow fVDB: a coarse voxel's centre is the centre of the
block of fine voxels it covers; a dual grid's voxels sit at the corners of the primal voxels.
"""

from __future__ import annotations

import itertools

import torch

from .jagged_tensor import JaggedTensor


def _factor(name: str, factor) -> torch.Tensor:
    f = torch.as_tensor(factor, dtype=torch.int64).flatten()
    if f.numel() == 1:
        f = f.expand(3)
    if f.numel() != 3 or (f < 1).any():
        raise ValueError(f"{name}: factor must be a positive int or three of them, got {factor!r}")
    return f.clone()


def _offsets(extent: torch.Tensor) -> torch.Tensor:
    """All integer offsets in [0, extent) per axis, as [n, 3] int32."""
    ranges = [range(int(e)) for e in extent]
    return torch.tensor(list(itertools.product(*ranges)), dtype=torch.int32).reshape(-1, 3)


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


def coarsened(grid, factor):
    f = _factor("coarsened_grid", factor)
    ijk = grid.ijk()
    coarse = _parents(ijk, f)
    sizes = grid.voxel_sizes * f
    origins = grid.origins + (f - 1) / 2 * grid.voxel_sizes
    return type(grid).from_ijk(coarse, voxel_sizes=sizes.tolist(), origins=origins.tolist())


def refined(grid, factor):
    f = _factor("refined_grid", factor)
    fine = _expand(grid.ijk(), _offsets(f), f)
    sizes = grid.voxel_sizes / f
    origins = grid.origins - (f - 1) / (2 * f) * grid.voxel_sizes
    return type(grid).from_ijk(fine, voxel_sizes=sizes.tolist(), origins=origins.tolist())


def dual(grid):
    corners = _expand(grid.ijk(), _offsets(torch.tensor([2, 2, 2])), torch.ones(3, dtype=torch.int64))
    origins = grid.origins - grid.voxel_sizes / 2
    return type(grid).from_ijk(corners, voxel_sizes=grid.voxel_sizes.tolist(), origins=origins.tolist())


def dilated(grid, n: int):
    if int(n) < 0:
        raise ValueError(f"dilated_grid: n must be >= 0, got {n}")
    n = int(n)
    shifts = _offsets(torch.tensor([2 * n + 1] * 3)) - n
    grown = _expand(grid.ijk(), shifts, torch.ones(3, dtype=torch.int64))
    return type(grid).from_ijk(grown, voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())


def pruned(grid, mask):
    data = mask.jdata if isinstance(mask, JaggedTensor) else mask
    if data.dtype != torch.bool or data.shape != (grid.total_voxels,):
        raise ValueError(
            f"pruned_grid: mask must be bool [{grid.total_voxels}], got {data.dtype} {list(data.shape)}"
        )
    ijk = grid.ijk()
    b = ijk.jidx.long()[data]
    counts = torch.bincount(b, minlength=grid.num_grids)
    joffsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    kept = JaggedTensor.from_data_and_offsets(ijk.jdata[data].contiguous(), joffsets)
    return type(grid).from_ijk(kept, voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())


def coarse_index(fine_grid, coarse_grid, factor) -> torch.Tensor:
    """Row in coarse_grid of each fine voxel's parent (-1 if the coarse grid lacks it)."""
    f = _factor("coarse_index", factor)
    ijk = fine_grid.ijk()
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
