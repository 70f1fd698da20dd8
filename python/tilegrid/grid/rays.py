"""Rays through a GridBatch, with fVDB's names and arguments: the active voxels a ray crosses
(`voxels_along_rays`), the segments of consecutive active voxels (`segments_along_rays`),
uniform samples inside them (`uniform_ray_samples`) and the first zero crossing of a
per-voxel field (`ray_implicit_intersection`).

    voxels, times = grid.voxels_along_rays(origins, directions, max_voxels=64)
    voxels[r]   # int32 ijk [n_r, 3] of the voxels along ray r, in order (their rows with
                # return_ijk=False)
    times[r]    # [n_r, 2]: t where ray r enters and leaves each, origin + t * direction

Rays are world space, t >= 0, in multiples of each direction's length; a JaggedTensor of
rays holds one tensor per grid (a plain [N, 3] tensor is taken for a one-grid batch). Results
are JaggedTensors with one entry per ray over all of the batch's rays (fVDB nests them per
grid as well). The march (C++, the same on CPU and GPU) steps over 128^3 lower-node cells,
over the 8^3 leaf cells of the lower nodes that exist, and through the voxels of the leaves
that exist.
"""

from __future__ import annotations

import torch

from .. import _C
from .._torch import current_stream, dlpack_pair
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
                      return_ijk: bool = True, cumulative: bool = False):
    """(voxels, times): for every ray, the first max_voxels active voxels it crosses, in order,
    as int32 ijk [n_r, 3] (return_ijk=True, fVDB's default) or, with return_ijk=False, as rows
    of their own grid (cumulative=True: rows of the batch's features), and times [n_r, 2]
    (entry and exit t, the rays' dtype). Crossings no longer than eps are left out."""
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


def _per_ray(grid, op: str, name: str, value, rays: JaggedTensor) -> JaggedTensor:
    if isinstance(value, JaggedTensor):
        value = value.jdata
    if not isinstance(value, torch.Tensor):
        value = torch.full((rays.jdata.shape[0],), float(value), dtype=rays.jdata.dtype,
                           device=rays.jdata.device)
    return rays.jagged_like(value.to(rays.jdata.dtype).contiguous())


def uniform_ray_samples(grid, ray_origins, ray_directions, t_min, t_max, step_size: float,
                        cone_angle: float = 0.0, include_end_segments: bool = True,
                        return_midpoints: bool = False, eps: float = 0.0) -> JaggedTensor:
    """Sample intervals [n_r, 2] (or midpoints [n_r]) along each ray inside its segments of
    active voxels between t_min and t_max (numbers, or [N] per ray): boundaries t_min,
    t_min + step, ..., each step max(step_size, t * cone_angle); whole intervals inside a
    segment, and the parts of those that cross a segment's end when include_end_segments."""
    origins = _rays(grid, "uniform_ray_samples", "ray_origins", ray_origins)
    directions = _rays(grid, "uniform_ray_samples", "ray_directions", ray_directions)
    lo = _per_ray(grid, "uniform_ray_samples", "t_min", t_min, origins)
    hi = _per_ray(grid, "uniform_ray_samples", "t_max", t_max, origins)
    offsets, times = (torch.from_dlpack(r) for r in _C.grid_uniform_ray_samples(
        grid._impl, *dlpack_pair(origins.jdata, origins.joffsets),
        *dlpack_pair(directions.jdata, directions.joffsets), *dlpack_pair(lo.jdata, lo.joffsets),
        *dlpack_pair(hi.jdata, hi.joffsets), float(step_size), float(cone_angle),
        bool(include_end_segments), bool(return_midpoints), float(eps), current_stream(origins.jdata)))
    return JaggedTensor._from_trusted(times, offsets)


def ray_implicit_intersection(grid, ray_origins, ray_directions, grid_scalars, eps: float = 0.0) -> JaggedTensor:
    """t of each ray's first zero crossing of grid_scalars ([total_voxels] or [total_voxels, 1],
    one value a voxel), -1 where there is none; jagged like the rays.

    Found by fVDB's rule: along the active voxels the ray crosses, the first whose value has a
    sign (0 and NaN have none) sets it, and the first later one of the other sign ends the
    search. Between two touching voxels the crossing is placed on the trilinear field between
    voxel centres where that is defined and changes sign there (exact for a linear field),
    else where the line through the two voxels' values crosses zero; after a gap, at the
    second voxel's entry."""
    origins = _rays(grid, "ray_implicit_intersection", "ray_origins", ray_origins)
    directions = _rays(grid, "ray_implicit_intersection", "ray_directions", ray_directions)
    scalars = grid_scalars.jdata if isinstance(grid_scalars, JaggedTensor) else grid_scalars
    if scalars.dim() == 2 and scalars.shape[1] == 1:
        scalars = scalars[:, 0]
    t = torch.from_dlpack(_C.grid_ray_implicit_intersection(
        grid._impl, *dlpack_pair(origins.jdata, origins.joffsets),
        *dlpack_pair(directions.jdata, directions.joffsets), scalars.contiguous(), float(eps),
        current_stream(origins.jdata)))
    return origins.jagged_like(t)
