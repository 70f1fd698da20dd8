"""Rays through a GridBatch, with fVDB's names and arguments: the active voxels a ray crosses
(`voxels_along_rays`) and the segments of consecutive active voxels (`segments_along_rays`).

    voxels, times = grid.voxels_along_rays(origins, directions, max_voxels=64)
    voxels[r]   # voxel rows (or ijk with return_ijk=True) along ray r, in order
    times[r]    # [n_r, 2]: t where ray r enters and leaves each, origin + t * direction

Rays are world space, t >= 0, in multiples of each direction's length; a JaggedTensor of
rays holds one tensor per grid (a plain [N, 3] tensor is taken for a one-grid batch). Results
are JaggedTensors with one entry per ray over all of the batch's rays (fVDB nests them per
grid as well). The march (C++, the same on CPU and GPU) steps over 8^3 leaf cells and through
the voxels of the leaves that exist.
"""

from __future__ import annotations

import torch

from . import _C
from ._torch import current_stream, dlpack_pair
from .jagged_tensor import JaggedTensor


def _rays(grid, op: str, name: str, value) -> JaggedTensor:
    if isinstance(value, torch.Tensor):
        if grid.num_grids != 1:
            raise TypeError(
                f"GridBatch.{op}: {name} must be a JaggedTensor (one tensor per grid) for a batch "
                f"of {grid.num_grids} grids; a plain tensor is taken for one grid only"
            )
        value = JaggedTensor([value])
    if not isinstance(value, JaggedTensor):
        raise TypeError(f"GridBatch.{op}: {name} must be a JaggedTensor, got {type(value).__name__}")
    return value


def _call(grid, op: str, fn, ray_origins, ray_directions, limit: int, eps: float):
    origins = _rays(grid, op, "ray_origins", ray_origins)
    directions = _rays(grid, op, "ray_directions", ray_directions)
    if origins.jdata.dtype != directions.jdata.dtype:
        raise TypeError(
            f"GridBatch.{op}: ray_origins and ray_directions must have one dtype, got "
            f"{origins.jdata.dtype} and {directions.jdata.dtype}"
        )
    results = fn(grid._impl, *dlpack_pair(origins.jdata, origins.joffsets),
                 *dlpack_pair(directions.jdata, directions.joffsets), int(limit), float(eps),
                 current_stream(origins.jdata))
    return origins, [torch.from_dlpack(r) for r in results]


def voxels_along_rays(grid, ray_origins, ray_directions, max_voxels: int, eps: float = 0.0,
                      return_ijk: bool = False, cumulative: bool = False):
    """(voxels, times): for every ray, the first max_voxels active voxels it crosses, in order,
    as rows of their own grid (cumulative=True: rows of the batch's features; return_ijk=True:
    int32 ijk [n_r, 3]), and times [n_r, 2] (entry and exit t, the rays' dtype). Crossings no
    longer than eps are left out."""
    origins, (offsets, rows, ijk, times) = _call(
        grid, "voxels_along_rays", _C.grid_voxels_along_rays, ray_origins, ray_directions,
        max_voxels, eps)
    if return_ijk:
        voxels = ijk
    elif not cumulative and grid.num_grids > 1:
        ray_grid = origins.jidx.long()
        per_hit = torch.repeat_interleave(ray_grid, offsets.diff(), output_size=rows.shape[0])
        voxels = rows - grid.voxel_offsets.to(rows.device)[per_hit]
    else:
        voxels = rows
    return (JaggedTensor._from_trusted(voxels, offsets),
            JaggedTensor._from_trusted(times, offsets))


def segments_along_rays(grid, ray_origins, ray_directions, max_segments: int, eps: float = 0.0):
    """For every ray, the first max_segments runs of consecutive active voxels it crosses, as
    [n_r, 2] (t where each run starts and ends)."""
    _, (offsets, times) = _call(grid, "segments_along_rays", _C.grid_segments_along_rays,
                                ray_origins, ray_directions, max_segments, eps)
    return JaggedTensor._from_trusted(times, offsets)
