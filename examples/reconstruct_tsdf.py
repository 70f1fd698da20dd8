"""Reconstructs the Stanford Bunny from depth images with tilegrid alone: the bunny's voxel grid
is rendered to depth images from ten cameras (GridBatch.voxels_along_rays, the first voxel a
ray meets), the images are fused into a TSDF grid (GridBatch.integrate_tsdf), the grid's zero
level is meshed (GridBatch.marching_cubes), and the mesh is compared with the original one
(Chamfer distance). Writes a PNG: one of the depth images and the reconstructed mesh.

    python examples/reconstruct_tsdf.py [--device cpu|cuda] [--across N] [--out DIR]

The depth images see the voxelized surface (within one voxel of the mesh); the TSDF voxels are
twice the rendered grid's, the truncation three TSDF voxels.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from png import write_png  # noqa: E402

import tilegrid as tg  # noqa: E402

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def look_at(eye: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """cam_to_world [4, 4] (float64): camera +z towards target, +x horizontal, +y downwards."""
    z = torch.nn.functional.normalize(target - eye, dim=0)
    up = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    if abs(float(z @ up)) > 0.99:
        up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    x = torch.nn.functional.normalize(torch.linalg.cross(z, up), dim=0)
    y = torch.linalg.cross(z, x)
    m = torch.eye(4, dtype=torch.float64)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = x, y, z, eye
    return m


def intrinsics(size: int, fov: float = 0.7) -> torch.Tensor:
    f = 0.5 * size / math.tan(fov / 2)
    return torch.tensor([[f, 0, size / 2], [0, f, size / 2], [0, 0, 1]], dtype=torch.float64)


def cameras(centre: torch.Tensor, radius: float, views: int = 10) -> list[torch.Tensor]:
    """views - 2 cameras around the model at two heights, one above and one below, 3 radii out."""
    poses = []
    for i in range(views - 2):
        azimuth, elevation = 2 * math.pi * i / (views - 2), (0.35 if i % 2 else -0.2)
        d = torch.tensor([math.cos(elevation) * math.sin(azimuth), math.sin(elevation),
                          math.cos(elevation) * math.cos(azimuth)], dtype=torch.float64)
        poses.append(look_at(centre + 3 * radius * d, centre))
    for sign in (1.0, -1.0):
        poses.append(look_at(centre + torch.tensor([0.0, sign * 3 * radius, 0.3 * radius], dtype=torch.float64), centre))
    return poses


def depth_image(grid, K: torch.Tensor, pose: torch.Tensor, size: int) -> torch.Tensor:
    """z-depth [size, size] (float64, 0 where the ray meets nothing) of the grid's first voxels:
    each ray's direction has camera z = 1, so the march's t is the depth."""
    rows, cols = torch.meshgrid(torch.arange(size, dtype=torch.float64), torch.arange(size, dtype=torch.float64),
                                indexing="ij")
    cam = torch.stack([(cols + 0.5 - K[0, 2]) / K[0, 0], (rows + 0.5 - K[1, 2]) / K[1, 1], torch.ones_like(rows)], -1)
    d = (cam.reshape(-1, 3) @ pose[:3, :3].T).to(grid.device)
    o = pose[:3, 3].expand_as(d).contiguous().to(grid.device)
    voxels, times = grid.voxels_along_rays(o, d, max_voxels=1)
    hit = voxels.joffsets.diff() > 0
    depth = torch.zeros(size * size, dtype=torch.float64, device=grid.device)
    depth[hit] = times.jdata[:, 0]
    return depth.reshape(size, size)


def surface_samples(vertices: torch.Tensor, faces: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """n points uniformly on the mesh's area (float64)."""
    g = torch.Generator().manual_seed(seed)
    v = vertices.double()[faces.long()]
    area = torch.linalg.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]).norm(dim=1)
    tri = torch.multinomial(area, n, replacement=True, generator=g)
    a, b = torch.rand(n, generator=g, dtype=torch.float64), torch.rand(n, generator=g, dtype=torch.float64)
    flip = a + b > 1
    a, b = torch.where(flip, 1 - a, a), torch.where(flip, 1 - b, b)
    t = v[tri]
    return t[:, 0] + a[:, None] * (t[:, 1] - t[:, 0]) + b[:, None] * (t[:, 2] - t[:, 0])


def nearest_distance(a: torch.Tensor, b: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """For each point of a, the distance to the nearest point of b (brute force, in chunks)."""
    return torch.cat([torch.cdist(a[i:i + chunk], b).min(1).values for i in range(0, a.shape[0], chunk)])


def splat(vertices: torch.Tensor, normals: torch.Tensor, K: torch.Tensor, pose: torch.Tensor, size: int) -> np.ndarray:
    """The mesh's vertices drawn as 3x3-pixel points, nearest in front, Lambert-shaded by their
    normals (a picture of a dense mesh without a rasterizer)."""
    w2c = torch.linalg.inv(pose)
    c = vertices.double() @ w2c[:3, :3].T + w2c[:3, 3]
    n = normals.double() @ w2c[:3, :3].T
    front = c[:, 2] > 0
    c, n = c[front], n[front]
    u = (K[0, 0] * c[:, 0] / c[:, 2] + K[0, 2]).long()
    v = (K[1, 1] * c[:, 1] / c[:, 2] + K[1, 2]).long()
    light = torch.nn.functional.normalize(torch.tensor([-0.3, -0.6, -0.75], dtype=torch.float64), dim=0)
    shade = (0.2 + 0.8 * (n @ light).clamp(min=0)).numpy()
    order = torch.argsort(c[:, 2], descending=True).numpy()  # far first, so the nearest is written last
    image = np.full((size, size, 3), 24, dtype=np.uint8)
    colour = np.array([150.0, 190.0, 235.0])
    u, v = u.numpy()[order], v.numpy()[order]
    shade = shade[order]
    for du in (-1, 0, 1):
        for dv in (-1, 0, 1):
            ok = (u + du >= 0) & (u + du < size) & (v + dv >= 0) & (v + dv < size)
            image[(v + dv)[ok], (u + du)[ok]] = (shade[ok, None] * colour).clip(0, 255).astype(np.uint8)
    return image


def views_of_mesh(vertices: torch.Tensor, faces: torch.Tensor, device, across: int, size: int, views: int):
    """The mesh's grid (`across` voxels over its largest extent) and its depth images from
    `views` cameras: (voxel size, centre, radius, intrinsics, poses, depth images)."""
    extent = float((vertices.max(0).values - vertices.min(0).values).max())
    voxel = extent / across
    grid = tg.GridBatch.from_mesh(tg.JaggedTensor([vertices.to(device)]), tg.JaggedTensor([faces.to(device)]),
                                  voxel_sizes=[voxel] * 3)
    lo, hi = vertices.min(0).values.double(), vertices.max(0).values.double()
    centre, radius = (lo + hi) / 2, float((hi - lo).norm() / 2)
    K = intrinsics(size)
    poses = cameras(centre, radius, views)
    return voxel, centre, radius, K, poses, [depth_image(grid, K, p, size) for p in poses]


def observed_field(grid, tsdf, weights):
    """(the grid of the voxels some image has seen in front of their surface, their TSDF): what
    marching cubes should mesh (unseen voxels hold tsdf 0, weight 0)."""
    kept = grid.pruned_grid(weights.jdata > 0)
    rows = kept.ijk_to_index(grid.ijk, cumulative=True).jdata
    field = torch.zeros(kept.total_voxels, dtype=tsdf.jdata.dtype, device=tsdf.jdata.device)
    field[rows[rows >= 0]] = tsdf.jdata[rows >= 0]
    return kept, field


def reconstruct(vertices: torch.Tensor, faces: torch.Tensor, device, across: int = 1024, size: int = 512,
                views: int = 10, out_dir: str | None = None) -> dict:
    device = torch.device(device)
    extent = float((vertices.max(0).values - vertices.min(0).values).max())
    voxel, centre, radius, K, poses, depths = views_of_mesh(vertices, faces, device, across, size, views)

    tsdf_voxel, trunc = 2 * voxel, 6 * voxel
    fused = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32, device=device)]),
                                  voxel_sizes=[tsdf_voxel] * 3, origins=[centre.tolist()])
    tsdf = torch.zeros(0, dtype=torch.float64, device=device)
    weights = torch.zeros_like(tsdf)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for pose, depth in zip(poses, depths):
        fused, tsdf, weights = fused.integrate_tsdf(trunc, K[None], pose[None], tsdf, weights, depth[None])
    kept, field = observed_field(fused, tsdf, weights)
    mesh_v, mesh_f, mesh_n = kept.marching_cubes(field)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    # Chamfer distance on up to 200k points a side (surface samples of the original mesh,
    # vertices of the reconstruction), in units of the bunny's extent.
    n = min(200_000, mesh_v.jdata.shape[0])
    g = torch.Generator().manual_seed(1)
    pick = torch.randperm(mesh_v.jdata.shape[0], generator=g)[:n].to(device)
    ours = mesh_v.jdata[pick].double()
    truth = surface_samples(vertices, faces, n).to(device)
    to_truth, to_ours = nearest_distance(ours, truth), nearest_distance(truth, ours)
    chamfer = 0.5 * (float(to_truth.mean()) + float(to_ours.mean()))
    result = {"across": across, "image_size": size, "views": views, "tsdf_voxels": int(fused.total_voxels),
              "observed_voxels": int(kept.total_voxels), "mesh_vertices": int(mesh_v.jdata.shape[0]),
              "mesh_faces": int(mesh_f.jdata.shape[0]), "fuse_and_mesh_seconds": seconds,
              "chamfer": chamfer, "chamfer_in_tsdf_voxels": chamfer / tsdf_voxel,
              "chamfer_relative_to_extent": chamfer / extent,
              "p95_to_truth_in_tsdf_voxels": float(to_truth.quantile(0.95)) / tsdf_voxel}
    if out_dir:
        depth0 = depths[0].cpu()
        seen = depth0 > 0
        grey = np.full((size, size, 3), 24, dtype=np.uint8)
        if bool(seen.any()):
            lo_d, hi_d = float(depth0[seen].min()), float(depth0[seen].max())
            level = (235 - 170 * (depth0 - lo_d) / max(hi_d - lo_d, 1e-12)).clamp(0, 255).byte().numpy()
            grey[seen.numpy()] = level[seen.numpy()][:, None]
        view = look_at(centre + 3 * radius * torch.nn.functional.normalize(
            torch.tensor([0.8, 0.45, 0.6], dtype=torch.float64), dim=0), centre)
        picture = splat(mesh_v.jdata.cpu(), mesh_n.jdata.cpu(), K, view, size)
        os.makedirs(out_dir, exist_ok=True)
        write_png(os.path.join(out_dir, "tsdf_reconstruction.png"), np.concatenate([grey, picture], 1))
    return result


def main() -> None:
    from sample_models import find_bunny
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--across", type=int, default=None, help="rendered grid's voxels across the bunny")
    parser.add_argument("--out", default=os.path.join(_ROOT, "demo_output"))
    args = parser.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and tg.with_cuda else "cpu"))
    bunny = find_bunny()
    if bunny is None:
        raise SystemExit("reconstruct_tsdf: no bunny model (run scripts/fetch_models.sh)")
    vertices, faces = tg.read_mesh(bunny)
    across = args.across or (1024 if device.type == "cuda" else 128)
    result = reconstruct(vertices, faces, device, across, 512 if device.type == "cuda" else 128, out_dir=args.out)
    print(result)


if __name__ == "__main__":
    main()
