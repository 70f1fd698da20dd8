"""TSDF fusion of depth images into a growing sparse grid (fVDB's GridBatch.integrate_tsdf):

    grid, tsdf, weights = grid.integrate_tsdf(truncation_distance, projection_matrices,
                                              cam_to_world_matrices, tsdf, weights, depth_images)

Grid b takes depth image b, seen by a pinhole camera with intrinsics projection_matrices[b]
([3, 3]: fx, skew, cx / 0, fy, cy / 0, 0, 1) placed by cam_to_world_matrices[b] ([4, 4]; the
camera looks along its +z, image rows along +y; depth is z along the optical axis, 0 where
nothing was measured; pixel (r, c) is the ray through (c + 0.5, r + 0.5)). Two steps:

1. the grid grows by the voxels of the truncation band: every measured pixel's ray is sampled
   from depth - truncation to depth + truncation at half the smallest voxel size (in world
   distance), the samples' voxels (from_points) merged with the grid's (from_ijk). The old
   voxels keep their values; new ones start at tsdf 0, weight 0;
2. every voxel takes the image's projective signed distance into its weighted average
   (C++ tilegrid/grid/tsdf.h, one kernel on a GPU): tsdf in world units, clamped to
   [-truncation, truncation]; weights add up (1 a pixel, or weight_images).

Voxels that no pixel has seen in front of its surface keep weight 0 (those of the band just
behind a surface, for instance): prune them (grid.pruned_grid(weights > 0)) before meshing.
tsdf and weights: [total_voxels] or [total_voxels, 1], a JaggedTensor or a tensor, the depth
images' dtype (float32 or float64); the results have the same shape.
"""

from __future__ import annotations

import math

import torch

from .. import _C
from .._torch import current_stream
from .jagged_tensor import JaggedTensor

_OP = "GridBatch.integrate_tsdf"


def _camera_matrices(name: str, m: torch.Tensor, shape: tuple, B: int) -> torch.Tensor:
    if not isinstance(m, torch.Tensor) or m.shape != (B, *shape) or not m.is_floating_point():
        got = f"{m.dtype} {list(m.shape)}" if isinstance(m, torch.Tensor) else type(m).__name__
        raise ValueError(f"{_OP}: {name} must be a float tensor [{B}, {shape[0]}, {shape[1]}], got {got}")
    m = m.detach().to(torch.float64)
    if not bool(torch.isfinite(m).all()):
        raise ValueError(f"{_OP}: {name} must be finite")
    return m


def _check_intrinsics(K: torch.Tensor) -> None:
    last = K[:, 2].cpu()
    pinhole = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64, device="cpu")
    if not bool((last == pinhole).all()) or bool((K[:, 1, 0] != 0).any()):
        raise ValueError(f"{_OP}: projection_matrices must be pinhole intrinsics [[fx, s, cx], [0, fy, cy], "
                         f"[0, 0, 1]], got rows {K[0].tolist()} (first camera)")
    if not bool(((K[:, 0, 0] > 0) & (K[:, 1, 1] > 0)).all()):
        raise ValueError(f"{_OP}: projection_matrices' focal lengths must be > 0, got fx {K[:, 0, 0].tolist()}, "
                         f"fy {K[:, 1, 1].tolist()}")


def _check_rigid(T: torch.Tensor) -> None:
    bottom = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64, device=T.device)
    R = T[:, :3, :3]
    eye = torch.eye(3, dtype=torch.float64, device=T.device)
    if not bool((T[:, 3] == bottom).all()) or float((R @ R.transpose(1, 2) - eye).abs().max()) > 1e-6:
        raise ValueError(f"{_OP}: cam_to_world_matrices must be rigid transforms (orthonormal rotation, "
                         f"last row 0 0 0 1), got {T[0].tolist()} (first camera)")


def _voxel_rows(name: str, value, n: int, dtype: torch.dtype, device: torch.device):
    data = value.jdata if isinstance(value, JaggedTensor) else value
    if not isinstance(data, torch.Tensor) or data.shape not in ((n,), (n, 1)):
        got = list(data.shape) if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"{_OP}: {name} must be [{n}] or [{n}, 1] (one value a voxel), got {got}")
    if data.dtype != dtype or data.device != device:
        raise ValueError(f"{_OP}: {name} must be {dtype} on {device} (the depth images' dtype, the grid's "
                         f"device), got {data.dtype} on {data.device}")
    return data.reshape(n), data.dim() == 2


def _band_points(grid, truncation: float, K: torch.Tensor, cam_to_world: torch.Tensor,
                 depths: torch.Tensor, pixel_weights) -> JaggedTensor:
    """World points along every measured pixel's ray within truncation of its depth, spaced
    at most half the grid's smallest voxel size apart (one tensor a grid)."""
    B, H, W = depths.shape
    device = depths.device
    rows, cols = torch.meshgrid(torch.arange(H, device=device, dtype=torch.float64),
                                torch.arange(W, device=device, dtype=torch.float64), indexing="ij")
    spacing = 0.5 * float(grid.voxel_sizes.min())
    parts = []
    for b in range(B):
        d = depths[b].to(torch.float64)
        seen = (d > 0) & torch.isfinite(d)
        if pixel_weights is not None:
            seen &= pixel_weights[b] > 0
        fx, s, cx = K[b, 0].tolist()
        fy, cy = K[b, 1, 1].item(), K[b, 1, 2].item()
        yn = (rows[seen] + 0.5 - cy) / fy
        xn = (cols[seen] + 0.5 - cx - s * yn) / fx
        ray = torch.stack([xn, yn, torch.ones_like(xn)], 1)  # camera point at z = 1
        # z steps that keep consecutive samples at most `spacing` apart in world distance.
        dz = spacing / float(ray.norm(dim=1).max()) if ray.numel() else spacing
        steps = int(math.ceil(2 * truncation / dz))
        z = d[seen][:, None] + torch.linspace(-truncation, truncation, steps + 1, device=device, dtype=torch.float64)
        cam = (ray[:, None, :] * z[..., None])[z > 0]  # samples behind the camera add nothing
        world = cam @ cam_to_world[b, :3, :3].T + cam_to_world[b, :3, 3]
        parts.append(world)
    return JaggedTensor(parts)


def integrate_tsdf(grid, truncation_distance: float, projection_matrices: torch.Tensor,
                   cam_to_world_matrices: torch.Tensor, tsdf, weights, depth_images: torch.Tensor,
                   weight_images=None):
    """(grid, tsdf, weights) after fusing depth_images [B, H, W] into grid (see the module's
    docstring)."""
    B, device = grid.num_grids, grid.device
    trunc = float(truncation_distance)
    if not math.isfinite(trunc) or trunc <= 0:
        raise ValueError(f"{_OP}: truncation_distance must be finite and > 0, got {truncation_distance}")
    if (not isinstance(depth_images, torch.Tensor) or depth_images.dim() != 3 or depth_images.shape[0] != B
            or depth_images.dtype not in (torch.float32, torch.float64)):
        got = (f"{depth_images.dtype} {list(depth_images.shape)}" if isinstance(depth_images, torch.Tensor)
               else type(depth_images).__name__)
        raise ValueError(f"{_OP}: depth_images must be float32 or float64 [{B}, H, W] (one image a grid), got {got}")
    if depth_images.device != device:
        raise ValueError(f"{_OP}: depth_images are on {depth_images.device} but the grid is on {device}")
    dtype = depth_images.dtype
    if weight_images is not None:
        if (not isinstance(weight_images, torch.Tensor) or weight_images.shape != depth_images.shape
                or weight_images.dtype != dtype or weight_images.device != device):
            raise ValueError(f"{_OP}: weight_images must match depth_images ({dtype} {list(depth_images.shape)} "
                             f"on {device})")
        if bool((weight_images < 0).any()) or not bool(torch.isfinite(weight_images).all()):
            raise ValueError(f"{_OP}: weight_images must be finite and >= 0")
        weight_images = weight_images.contiguous()
    K = _camera_matrices("projection_matrices", projection_matrices, (3, 3), B)
    cam_to_world = _camera_matrices("cam_to_world_matrices", cam_to_world_matrices, (4, 4), B)
    _check_intrinsics(K)
    _check_rigid(cam_to_world)
    old_tsdf, column = _voxel_rows("tsdf", tsdf, grid.total_voxels, dtype, device)
    old_weights, _ = _voxel_rows("weights", weights, grid.total_voxels, dtype, device)

    K, cam_to_world = K.to(device), cam_to_world.to(device)
    depths = depth_images.contiguous()
    band = type(grid).from_points(_band_points(grid, trunc, K, cam_to_world, depths, weight_images),
                                  voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())
    old_ijk, band_ijk = grid.ijk, band.ijk
    merged = JaggedTensor([torch.cat([a, b]) for a, b in zip(old_ijk.unbind(), band_ijk.unbind())])
    grown = type(grid).from_ijk(merged, voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())
    rows = grown.ijk_to_index(old_ijk, cumulative=True).jdata
    new_tsdf = torch.zeros(grown.total_voxels, dtype=dtype, device=device)
    new_weights = torch.zeros_like(new_tsdf)
    new_tsdf[rows] = old_tsdf
    new_weights[rows] = old_weights

    world_to_camera = torch.linalg.inv(cam_to_world).contiguous()
    _C.grid_integrate_tsdf(grown._impl, trunc, K.contiguous(), world_to_camera, depths, weight_images,
                           new_tsdf, new_weights, current_stream(depths))
    offsets = grown.voxel_offsets.to(device)
    shape = (-1, 1) if column else (-1,)
    return (grown, JaggedTensor._from_trusted(new_tsdf.reshape(shape), offsets),
            JaggedTensor._from_trusted(new_weights.reshape(shape), offsets))
