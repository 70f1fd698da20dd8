"""Selecting, joining and making grid batches by fVDB's rules: grid[i], grid[1:3],
grid[[0, 2]], grid[mask] (GridBatch.__getitem__), batches with no grid or with empty grids,
dense batches over world-space bounds, and the inverse of ijk_to_index.

A selection is a new batch built from the chosen grids' coordinates, voxel sizes and origins:
a copy (fVDB may return a view), whose voxels keep the order they had in the batch, so that
the rows joffsets[i]:joffsets[i + 1] of the batch's features are grid[i]'s features.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import torch

from .jagged_tensor import JaggedTensor


def _grid_ids(op: str, count: int, index) -> list[int]:
    """The grids an fVDB-style index names, in order: an int (negative from the end), a slice,
    a list of ints or of bools (a mask of `count`), or an integer or bool tensor likewise."""
    if isinstance(index, torch.Tensor):
        if index.dim() > 1:
            raise IndexError(f"{op}: an index tensor must have at most one dimension, got shape "
                             f"{list(index.shape)}")
        if index.dtype == torch.bool:
            index = index.tolist() if index.dim() == 1 else [bool(index)]
            if not index:
                return []
        elif not index.dtype.is_floating_point and not index.is_complex():
            index = index.tolist() if index.dim() == 1 else int(index)
        else:
            raise IndexError(f"{op}: an index tensor must be of integers or bools, got {index.dtype}")
    if isinstance(index, numbers.Integral) and not isinstance(index, bool):
        b = int(index)
        if not -count <= b < count:
            raise IndexError(f"{op}: grid {b} out of range for {count} grids")
        return [b % count]
    if isinstance(index, slice):
        return list(range(count))[index]
    if isinstance(index, list):
        if index and all(isinstance(x, bool) for x in index):
            if len(index) != count:
                raise IndexError(f"{op}: a boolean mask must have one entry a grid ({count}), got "
                                 f"{len(index)}")
            return [b for b, keep in enumerate(index) if keep]
        if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in index):
            raise IndexError(f"{op}: a list index must hold ints or bools (not a mix), got "
                             f"{sorted({type(x).__name__ for x in index})}")
        return [_grid_ids(op, count, int(x))[0] for x in index]
    raise TypeError(f"{op}: expected an int, a slice, a list or a tensor, got {type(index).__name__}")


def select_grids(grid, index):
    """The grids of `grid` that `index` names, as a new batch (see _grid_ids)."""
    from .batch import GridBatch

    ids = _grid_ids("GridBatch[...]", grid.num_grids, index)
    if not ids:
        return zero_grids(grid.device)
    parts = grid.ijk.unbind()
    return GridBatch.from_ijk(JaggedTensor([parts[b] for b in ids]), voxel_sizes=grid.voxel_sizes[ids].tolist(),
                              origins=grid.origins[ids].tolist())


def zero_grids(device="cpu"):
    """A batch that holds no grid, on `device`."""
    from .batch import GridBatch

    device = torch.device(device)
    empty = JaggedTensor.from_data_and_offsets(torch.zeros(0, 3, dtype=torch.int32, device=device),
                                               torch.zeros(1, dtype=torch.int64, device=device))
    return GridBatch.from_ijk(empty)


def _rows(op: str, name: str, value) -> int:
    """How many grids a per-grid value describes: 1 for a number or a [3], B for a [B, 3]."""
    t = torch.as_tensor(value, dtype=torch.float64, device="cpu")
    if t.dim() <= 1:
        return 1
    if t.dim() != 2 or t.shape[1] != 3:
        raise ValueError(f"{op}: {name} must be a number, a [3] or a [num_grids, 3], got shape {list(t.shape)}")
    return t.shape[0]


def zero_voxel_grids(device="cpu", voxel_sizes=1, origins=0):
    """Grids with no active voxel, one for each row of voxel_sizes / origins (one if neither
    has rows)."""
    from .batch import GridBatch

    op = "GridBatch.from_zero_voxels"
    n_sizes, n_origins = _rows(op, "voxel_sizes", voxel_sizes), _rows(op, "origins", origins)
    if n_sizes != n_origins and 1 not in (n_sizes, n_origins):
        raise ValueError(f"{op}: voxel_sizes and origins describe {n_sizes} and {n_origins} grids")
    count = max(n_sizes, n_origins)
    device = torch.device(device)
    empty = JaggedTensor.from_data_and_offsets(torch.zeros(0, 3, dtype=torch.int32, device=device),
                                               torch.zeros(count + 1, dtype=torch.int64, device=device))
    return GridBatch.from_ijk(empty, voxel_sizes=voxel_sizes, origins=origins)


def concatenated(grids: Sequence):
    """One batch of the grids of every batch in `grids`, in order (fVDB's from_cat)."""
    from .batch import GridBatch, jcat

    grids = list(grids)
    if not grids:
        raise ValueError("GridBatch.from_cat: expected at least one GridBatch, got none")
    for g in grids:
        if not isinstance(g, GridBatch):
            raise TypeError(f"GridBatch.from_cat: expected GridBatches, got {type(g).__name__}")
    return jcat(grids)


def dense_over_bounds(num_grids, dense_dims, bounds_min=0, bounds_max=1, voxel_center=False, device="cpu"):
    """num_grids dense grids of dense_dims voxels spanning [bounds_min, bounds_max] in world
    space: the bounds are the outer faces of the end voxels, or with voxel_center the centres
    of the end voxels."""
    from .batch import GridBatch

    op = "GridBatch.from_dense_axis_aligned_bounds"
    dims = torch.as_tensor(dense_dims, dtype=torch.int64, device="cpu").expand(3).clone()
    low = torch.as_tensor(bounds_min, dtype=torch.float64, device="cpu").expand(3).clone()
    high = torch.as_tensor(bounds_max, dtype=torch.float64, device="cpu").expand(3).clone()
    if bool((dims < 1).any()):
        raise ValueError(f"{op}: dense_dims must be positive, got {dims.tolist()}")
    if not bool((high > low).all()):
        raise ValueError(f"{op}: bounds_max must exceed bounds_min on every axis, got {low.tolist()} and "
                         f"{high.tolist()}")
    if voxel_center:
        if bool((dims < 2).any()):
            raise ValueError(f"{op}: with voxel_center=True the bounds are two voxel centres an axis, so "
                             f"dense_dims must be at least 2, got {dims.tolist()}")
        size, origin = (high - low) / (dims - 1).double(), low
    else:
        size = (high - low) / dims.double()
        origin = low + 0.5 * size
    return GridBatch.from_dense(num_grids, dims.tolist(), voxel_sizes=size.tolist(), origins=origin.tolist(),
                                device=torch.device(device))


def inverse_index(grid, ijk: JaggedTensor, cumulative: bool = False) -> JaggedTensor:
    """For each voxel of `grid`, which row of ijk names it (within ijk's tensor of that grid,
    or of all of ijk with cumulative=True), -1 where none does; of several, the last."""
    rows = grid.ijk_to_index(ijk, cumulative=True).jdata
    where = torch.arange(rows.shape[0], device=rows.device)
    if not cumulative and rows.shape[0]:
        where = where - ijk.joffsets.to(rows.device)[ijk.jidx.long()]
    out = torch.full((grid.total_voxels,), -1, dtype=torch.int64, device=rows.device)
    hit = rows >= 0
    out.scatter_reduce_(0, rows[hit], where[hit], reduce="amax")
    return grid.jagged_like(out)
