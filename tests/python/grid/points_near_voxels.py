"""World points around a grid's active voxels, for the tests of lookups and samplers."""

import torch


def points_near_voxels(grid, counts, spread: float, empty_scale: float, far: torch.Tensor):
    """float64 [n_b + F, 3] a grid: n_b = counts[b] points within `spread` voxels (along each
    axis) of random active voxels of grid b (normal points times `empty_scale` for a grid
    without voxels), then the float64 [F, 3] points `far` (far from every voxel)."""
    centres = grid.voxel_to_world(grid.ijk).jdata.cpu().double()
    parts = []
    for b, n in enumerate(counts):
        mine = centres[grid.joffsets[b]:grid.joffsets[b + 1]]
        if len(mine):
            pick = mine[torch.randint(0, len(mine), (n,))]
            jitter = torch.rand(n, 3, dtype=torch.float64) * (2 * spread) - spread
            pts = pick + jitter * grid.voxel_sizes[b]
        else:
            pts = torch.randn(n, 3, dtype=torch.float64) * empty_scale
        parts.append(torch.cat([pts, far]))
    return parts
