"""Yes/no questions about regions of space against a GridBatch's active voxels, with fVDB's
names and arguments: whether axis-aligned cubes lie wholly in active voxels
(`cubes_in_grid`) or touch any (`cubes_intersect_grid`), and whether rays hit any
(`rays_intersect_voxels`).

A cube is given by its world-space centre and the offsets of its lowest and highest corners
from it (cube_min, cube_max). As in fVDB, each corner is taken to the voxel whose centre is
nearest (continuous voxel coordinate u rounded as NanoVDB rounds, floor(u + 1/2): a corner on a
face between two voxels goes to the upper one), and the cube covers the voxels between the
two, both included. With the default offsets 0 a cube is its centre's voxel.

Cubes are answered with torch tensor ops over the grid's lookups (ijk_to_index), so they run
on the grid's device, CPU or CUDA: each cube either looks up every voxel of its box or, where
the box holds more voxels than its grid, compares the grid's voxels with the box, in chunks of
about 4 million lookups. Rays use the march of voxels_along_rays (rays.py).
"""

from __future__ import annotations

import math
import numbers

import torch

from . import rays
from .checks import FAR, check_vectors
from .jagged_tensor import JaggedTensor


# Lookups (or comparisons) done at once.
_CHUNK = 1 << 22



def _offset3(op: str, name: str, value) -> list[float]:
    """A number or three numbers (a list, tuple or tensor) as three finite floats."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{op}: {name} must be a number or three numbers, got a "
                            f"{value.dtype} tensor")
        value = value.detach().cpu().tolist()
    if isinstance(value, (str, bytes)) or isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a number or three numbers, got {value!r}")
    items = list(value) if hasattr(value, "__iter__") else [value] * 3
    if len(items) != 3:
        raise ValueError(f"{op}: {name} must be a number or three numbers, got {value!r}")
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{op}: {name} must be a number or three numbers, got {value!r}")
        out.append(float(v))
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    return out


def _boxes(op: str, grid, cube_centers, cube_min, cube_max):
    """(centres, b, s, e): each cube's grid (int64 [N]) and its box of voxels [s, e] (int64
    [N, 3], both corners included, s <= e)."""
    centres = check_vectors(op, "cube_centers", grid, cube_centers)
    lo, hi = _offset3(op, "cube_min", cube_min), _offset3(op, "cube_max", cube_max)
    if any(a > z for a, z in zip(lo, hi)):
        raise ValueError(f"{op}: cube_min must be <= cube_max along every axis, got cube_min "
                         f"{lo} and cube_max {hi}")
    c = centres.jdata.double()
    b = centres.jidx.long()
    sizes, origins = (t.to(c.device) for t in (grid.voxel_sizes, grid.origins))
    corners = []
    for offset in (lo, hi):
        shift = torch.tensor(offset, dtype=torch.float64, device=c.device)
        u = ((c + shift - origins[b]) / sizes[b]).clamp(-FAR, FAR)
        corners.append(torch.floor(u + 0.5).to(torch.int64))
    return centres, b, corners[0], corners[1]


def _chunks(cost: torch.Tensor) -> list[tuple[int, int]]:
    """[(first, end)]: runs of consecutive items whose costs add up to about _CHUNK (an item
    that costs more alone)."""
    if cost.numel() == 0:
        return []
    ends = torch.cumsum(cost, 0)
    total = int(ends[-1])
    if total <= _CHUNK:
        return [(0, cost.numel())]
    marks = torch.arange(_CHUNK, total, _CHUNK, device=cost.device, dtype=ends.dtype)
    cuts = torch.unique(torch.searchsorted(ends, marks, right=True)).tolist()
    edges = [0] + [c for c in cuts if 0 < c < cost.numel()] + [cost.numel()]
    return list(zip(edges[:-1], edges[1:]))


def _jagged_by_grid(grid, ijk: torch.Tensor, grid_of: torch.Tensor) -> JaggedTensor:
    """ijk ([T, 3], grid_of [T] non-decreasing) as a JaggedTensor with one tensor a grid."""
    counts = torch.bincount(grid_of, minlength=grid.num_grids)
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return JaggedTensor._from_trusted(ijk, offsets)


def _count_by_lookup(grid, b, s, e) -> torch.Tensor:
    """int64 [M]: the active voxels of grid b[m] in the box [s[m], e[m]], each of the box's
    voxels looked up (cubes in order of their grids)."""
    dims = e - s + 1
    volume = dims.prod(1)
    counts = torch.zeros(b.shape[0], dtype=torch.int64, device=b.device)
    for first, end in _chunks(volume):
        d, v = dims[first:end], volume[first:end]
        total = int(v.sum())
        owner = torch.repeat_interleave(torch.arange(end - first, device=b.device), v,
                                        output_size=total)
        local = torch.arange(total, device=b.device) - (torch.cumsum(v, 0) - v)[owner]
        nj, nk = d[owner, 1], d[owner, 2]
        step = torch.stack([local // (nj * nk), (local // nk) % nj, local % nk], 1)
        ijk = s[first:end][owner] + step
        queries = _jagged_by_grid(grid, ijk, b[first:end][owner])
        rows = grid.ijk_to_index(queries, cumulative=True).jdata
        counts[first:end] = torch.zeros(end - first, dtype=torch.int64, device=b.device).index_add_(
            0, owner, (rows >= 0).to(torch.int64))
    return counts


def _count_by_comparison(grid, b, s, e) -> torch.Tensor:
    """int64 [M]: the active voxels of grid b[m] in the box [s[m], e[m]], each of the grid's
    voxels compared with the box."""
    voxels = grid.ijk.jdata.to(torch.int64)
    first_row = grid.voxel_offsets.to(b.device)
    per_grid = grid.num_voxels.to(b.device)[b]
    counts = torch.zeros(b.shape[0], dtype=torch.int64, device=b.device)
    for first, end in _chunks(per_grid):
        n = per_grid[first:end]
        total = int(n.sum())
        owner = torch.repeat_interleave(torch.arange(end - first, device=b.device), n,
                                        output_size=total)
        local = torch.arange(total, device=b.device) - (torch.cumsum(n, 0) - n)[owner]
        v = voxels[first_row[b[first:end][owner]] + local]
        inside = ((v >= s[first:end][owner]) & (v <= e[first:end][owner])).all(1)
        counts[first:end] = torch.zeros(end - first, dtype=torch.int64, device=b.device).index_add_(
            0, owner, inside.to(torch.int64))
    return counts


def _grid_boxes(grid, b):
    """(lowest, highest, voxel count) of each cube's grid: int64 [N, 3], [N, 3], [N]."""
    boxes = grid.bboxes.to(torch.int64).to(b.device)
    return boxes[b, 0], boxes[b, 1], grid.num_voxels.to(b.device)[b]


def cubes_in_grid(grid, cube_centers: JaggedTensor, cube_min=0, cube_max=0) -> JaggedTensor:
    """Whether each cube lies wholly in active voxels: every voxel of its box (the module's
    docstring says which) is active.

    Args:
        grid: The GridBatch.
        cube_centers: The cubes' centres in world space, a JaggedTensor with one [N_b, 3]
            floating tensor a grid (finite).
        cube_min: The offset of the cubes' lowest corner from their centre, in world units: a
            number (every axis) or three numbers; default 0.
        cube_max: The offset of their highest corner, likewise (>= cube_min on every axis);
            default 0.

    Returns:
        bool [N] jagged like cube_centers. False for every cube of a grid without voxels.
    """
    op = "GridBatch.cubes_in_grid"
    centres, b, s, e = _boxes(op, grid, cube_centers, cube_min, cube_max)
    low, high, count = _grid_boxes(grid, b)
    # A box that leaves its grid's bounding box holds an inactive voxel; one that holds more
    # voxels than its grid has cannot be covered. Only the others are looked up.
    volume = (e - s + 1).double().prod(1)
    maybe = (count > 0) & (s >= low).all(1) & (e <= high).all(1) & (volume <= count.double())
    out = torch.zeros(b.shape[0], dtype=torch.bool, device=b.device)
    pick = maybe.nonzero()[:, 0]
    if pick.numel():
        found = _count_by_lookup(grid, b[pick], s[pick], e[pick])
        out[pick] = found == (e[pick] - s[pick] + 1).prod(1)
    return centres.jagged_like(out)


def cubes_intersect_grid(grid, cube_centers: JaggedTensor, cube_min=0, cube_max=0) -> JaggedTensor:
    """Whether each cube touches an active voxel: some voxel of its box (the module's docstring
    says which) is active.

    Args:
        grid: The GridBatch.
        cube_centers: The cubes' centres in world space, a JaggedTensor with one [N_b, 3]
            floating tensor a grid (finite).
        cube_min: The offset of the cubes' lowest corner from their centre, in world units: a
            number (every axis) or three numbers; default 0.
        cube_max: The offset of their highest corner, likewise (>= cube_min on every axis);
            default 0.

    Returns:
        bool [N] jagged like cube_centers. False for every cube of a grid without voxels.
    """
    op = "GridBatch.cubes_intersect_grid"
    centres, b, s, e = _boxes(op, grid, cube_centers, cube_min, cube_max)
    low, high, count = _grid_boxes(grid, b)
    # Only the part of a box inside its grid's bounding box can hold active voxels.
    s, e = torch.maximum(s, low), torch.minimum(e, high)
    overlap = (count > 0) & (s <= e).all(1)
    volume = (e - s + 1).clamp(min=0).double().prod(1)
    by_lookup = overlap & (volume <= count.double())
    out = torch.zeros(b.shape[0], dtype=torch.bool, device=b.device)
    ways = ((by_lookup, _count_by_lookup), (overlap & ~by_lookup, _count_by_comparison))
    for pick, count_in in ways:
        pick = pick.nonzero()[:, 0]
        if pick.numel():
            out[pick] = count_in(grid, b[pick], s[pick], e[pick]) > 0
    return centres.jagged_like(out)


def rays_intersect_voxels(grid, ray_origins, ray_directions, eps: float = 0.0) -> JaggedTensor:
    """Whether each ray (origin + t * direction, t >= 0) crosses an active voxel, over a length
    of t longer than eps: whether voxels_along_rays finds one.

    Args:
        grid: The GridBatch.
        ray_origins: The rays' origins in world space, a JaggedTensor with one [N_b, 3]
            floating tensor a grid (a plain [N, 3] tensor for a batch of one grid).
        ray_directions: Their directions, likewise (jagged like ray_origins, of its dtype;
            need not be unit length: t counts in multiples of each direction).
        eps: Crossings of a voxel no longer than this (in t) do not count; a number >= 0,
            default 0.

    Returns:
        bool [N] jagged like ray_origins. A ray whose direction is zero hits where its origin
        is in an active voxel.
    """
    op = "GridBatch.rays_intersect_voxels"
    origins, directions = (
        check_vectors(op, name, grid, rays._rays(grid, op, name, value))
        for name, value in (("ray_origins", ray_origins), ("ray_directions", ray_directions)))
    if directions.jdata.dtype != origins.jdata.dtype:
        raise TypeError(f"{op}: ray_origins and ray_directions must have one dtype, got "
                        f"{origins.jdata.dtype} and {directions.jdata.dtype}")
    if not torch.equal(origins.joffsets, directions.joffsets.to(origins.joffsets.device)):
        raise ValueError(f"{op}: ray_origins and ray_directions must be jagged alike (one "
                         f"direction a ray), got rays per grid {origins.joffsets.diff().tolist()} "
                         f"and {directions.joffsets.diff().tolist()}")
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool):
        raise TypeError(f"{op}: eps must be a number, got {eps!r}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {eps!r}")
    _, times = rays.voxels_along_rays(grid, origins, directions, 1, float(eps), False, True)
    hit = times.joffsets.diff() > 0
    return origins.jagged_like(hit.to(origins.jdata.device))
