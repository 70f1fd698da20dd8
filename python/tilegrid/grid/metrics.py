"""Scores of a generated grid against a reference, per grid of a batch, for a generative
model of voxel grids (fVDB's XCube experiments; examples/generate_shapes.py):

    iou = tg.voxel_iou(generated, truth)                    # float64 [B]
    chamfer = tg.voxel_chamfer_distance(generated, truth)   # float64 [B], world units

Each is a composition of the grid's lookups with torch ops, so it runs where the grids are, on
the CPU or a GPU.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .jagged_tensor import JaggedTensor

# Query points x target points per torch.cdist call in voxel_chamfer_distance: 2**22 float64
# distances are 32 MiB, so a 50k-voxel target takes 83 queries a call.
_CDIST_BLOCK = 2**22


def _ijk(grid) -> JaggedTensor:
    """grid's voxel coordinates, whether GridBatch.ijk is a method or (as in fVDB) a property."""
    ijk = grid.ijk
    return ijk if isinstance(ijk, JaggedTensor) else ijk()


def _same_space(op: str, a, b) -> None:
    """Raises unless a and b are GridBatches of as many grids, on one device, with the same
    voxel sizes and origins (so that equal ijk is the same voxel)."""
    for name, g in (("a", a), ("b", b)):
        if not all(hasattr(g, attr) for attr in ("ijk_to_index", "voxel_offsets", "voxel_sizes")):
            raise TypeError(f"{op}: {name} must be a GridBatch, got {type(g).__name__}")
    if a.num_grids != b.num_grids:
        raise ValueError(f"{op}: a has {a.num_grids} grids but b has {b.num_grids}")
    if a.device != b.device:
        raise ValueError(f"{op}: a is on {a.device} but b on {b.device}")
    if not (torch.allclose(a.voxel_sizes, b.voxel_sizes, rtol=1e-9, atol=0)
            and torch.allclose(a.origins, b.origins, rtol=1e-9, atol=1e-12)):
        raise ValueError(f"{op}: a and b must share voxel sizes and origins, got sizes "
                         f"{a.voxel_sizes.tolist()} and {b.voxel_sizes.tolist()}, origins "
                         f"{a.origins.tolist()} and {b.origins.tolist()}")


def voxel_iou(a, b) -> torch.Tensor:
    """Intersection over union of the active voxels of each grid of a and the same grid of b.

    Args:
        a: A GridBatch.
        b: A GridBatch of as many grids, on the same device, with the same voxel sizes and
            origins (voxels are compared by ijk).

    Returns:
        float64 [B] on the grids' device: ``|a_i and b_i| / |a_i or b_i|`` for grid i, 1 where both
        grids are empty.
    """
    _same_space("voxel_iou", a, b)
    a_ijk = _ijk(a)
    inside = (b.ijk_to_index(a_ijk).jdata >= 0).to(torch.float64)
    shared = torch.zeros(a.num_grids, dtype=torch.float64, device=inside.device)
    shared.index_add_(0, a_ijk.jidx.long(), inside)
    sizes_a = torch.diff(a.voxel_offsets).to(shared)
    sizes_b = torch.diff(b.voxel_offsets).to(shared)
    union = sizes_a + sizes_b - shared
    return torch.where(union > 0, shared / union.clamp(min=1), torch.ones_like(shared))


def _mean_nearest(queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean over queries [n, 3] of the distance to the nearest of targets [m, 3] (m > 0),
    exact, in blocks of queries that keep each distance matrix within _CDIST_BLOCK entries."""
    step = max(1, _CDIST_BLOCK // targets.shape[0])
    total = queries.new_zeros(())
    for start in range(0, queries.shape[0], step):
        # Differences, not |q|^2 + |t|^2 - 2 q.t: the matrix-product form is faster but leaves
        # ~1e-8 of the coordinates' size where a distance is 0, as most are here.
        d = torch.cdist(queries[start:start + step], targets,
                        compute_mode="donot_use_mm_for_euclid_dist")
        total = total + d.amin(1).sum()
    return total / queries.shape[0]


def voxel_chamfer_distance(a, b, max_queries: Optional[int] = None,
                           generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The symmetric Chamfer distance between the voxel centres of each grid of a and the same
    grid of b, in world units: (mean over a's centres of the distance to the nearest of b's +
    the same from b to a) / 2. Nearest neighbours are found exactly (by brute force, in
    blocks).

    Args:
        a: A GridBatch.
        b: A GridBatch of as many grids, on the same device, with the same voxel sizes and
            origins.
        max_queries: None (default): every voxel is a query. Else, in each direction, a grid
            with more voxels than this averages over max_queries of them, the first of a random
            permutation (torch.randperm drawn with generator, on the CPU), searched against
            every voxel of the other grid: an unbiased estimate at a cost linear in the voxels.
        generator: The torch.Generator that draws the queries; None: torch's default.

    Returns:
        float64 [B] on the grids' device: 0 where both grids are empty, inf where only one is.
    """
    _same_space("voxel_chamfer_distance", a, b)
    if max_queries is not None and (isinstance(max_queries, bool)
                                    or not isinstance(max_queries, int) or max_queries < 1):
        raise ValueError(f"voxel_chamfer_distance: max_queries must be None or an int >= 1, "
                         f"got {max_queries!r}")
    centres_a = a.voxel_to_world(_ijk(a)).unbind()
    centres_b = b.voxel_to_world(_ijk(b)).unbind()

    def pick(points: torch.Tensor) -> torch.Tensor:
        if max_queries is None or points.shape[0] <= max_queries:
            return points
        order = torch.randperm(points.shape[0], generator=generator)[:max_queries]
        return points[order.to(points.device)]

    out = []
    for pa, pb in zip(centres_a, centres_b):
        if pa.shape[0] == 0 or pb.shape[0] == 0:
            out.append(pa.new_tensor(0.0 if pa.shape[0] == pb.shape[0] else math.inf))
        else:
            out.append((_mean_nearest(pick(pa), pb) + _mean_nearest(pick(pb), pa)) / 2)
    device = a.device
    return torch.stack(out) if out else torch.zeros(0, dtype=torch.float64, device=device)
