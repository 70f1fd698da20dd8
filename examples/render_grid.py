"""Renders a sparse grid to a PNG with tilegrid's ray marcher: one ray a pixel from a pinhole
camera, the first active voxel each ray meets (GridBatch.voxels_along_rays, max_voxels=1),
shaded by the face the ray enters it through (Lambert, one light) and dimmed with depth.

    python examples/render_grid.py            # the bunny (scripts/fetch_models.sh), else a sphere
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from png import write_png  # noqa: E402

import tilegrid as tg  # noqa: E402


def camera_rays(centre: torch.Tensor, radius: float, width: int, height: int,
                azimuth: float = 0.6, elevation: float = 0.35, fov: float = 0.6):
    """Origins and unit directions [H*W, 3] (float64) of a camera on a sphere of 3 radii around
    centre, looking at it, y up."""
    eye = centre + 3 * radius * torch.tensor(
        [math.cos(elevation) * math.sin(azimuth), math.sin(elevation),
         math.cos(elevation) * math.cos(azimuth)], dtype=torch.float64)
    forward = torch.nn.functional.normalize(centre - eye, dim=0)
    right = torch.nn.functional.normalize(torch.linalg.cross(forward, torch.tensor([0.0, 1, 0]).double()), dim=0)
    up = torch.linalg.cross(right, forward)
    ys, xs = torch.meshgrid(torch.arange(height, dtype=torch.float64),
                            torch.arange(width, dtype=torch.float64), indexing="ij")
    half = math.tan(fov / 2)
    px = (2 * (xs + 0.5) / width - 1) * half * width / height
    py = (1 - 2 * (ys + 0.5) / height) * half
    d = forward + px[..., None] * right + py[..., None] * up
    d = torch.nn.functional.normalize(d.reshape(-1, 3), dim=1)
    return eye.expand_as(d).contiguous(), d


def render(grid: "tg.GridBatch", path: str, width: int = 512, height: int = 512) -> dict:
    """Writes the picture of grid 0 to path; returns the time of the march and a self-check:
    hits whose entry point is not on the surface of the voxel listed (should be 0)."""
    device = grid.device
    ijk = grid.ijk.jdata.double()
    size, origin = grid.voxel_sizes[0].double().cpu(), grid.origins[0].double().cpu()
    lo = origin + size * (ijk.min(0).values.cpu() - 0.5)
    hi = origin + size * (ijk.max(0).values.cpu() + 0.5)
    centre, radius = (lo + hi) / 2, float((hi - lo).norm() / 2)
    o, d = camera_rays(centre, radius, width, height)
    o, d = o.to(device), d.to(device)
    march = lambda: grid.voxels_along_rays(o, d, max_voxels=1, return_ijk=True)  # noqa: E731
    march()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    voxels, times = march()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    hit = (voxels.joffsets.diff() > 0).cpu()
    t = times.jdata[:, 0].cpu()
    v = voxels.jdata.double().cpu()
    p = o.cpu()[hit] + t[:, None] * d.cpu()[hit]
    local = (p - origin) / size - v  # in [-0.5, 0.5]^3 on the voxel's surface
    wrong = int(((local.abs().max(1).values - 0.5).abs() > 1e-6).sum())
    axis = local.abs().argmax(1)
    normal = torch.zeros_like(local)
    normal[torch.arange(len(axis)), axis] = torch.sign(local[torch.arange(len(axis)), axis])
    light = torch.nn.functional.normalize(torch.tensor([0.4, 0.8, 0.6]).double(), dim=0)
    lambert = (normal @ light).clamp(min=0)
    depth = (t - t.min()) / max(float(t.max() - t.min()), 1e-9) if len(t) else t
    shade = (0.25 + 0.75 * lambert) * (1 - 0.45 * depth)
    image = np.full((height * width, 3), 24, dtype=np.uint8)  # background
    colour = torch.tensor([235.0, 200.0, 150.0]).double()
    image[hit.numpy()] = (shade[:, None] * colour).clamp(0, 255).round().byte().numpy()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_png(path, image.reshape(height, width, 3))
    return {"seconds": seconds, "rays": width * height, "hits": int(hit.sum()), "wrong": wrong}


def main() -> None:
    from sample_models import find_bunny
    device = torch.device("cuda" if torch.cuda.is_available() and tg.with_cuda else "cpu")
    bunny = find_bunny()
    if bunny is not None:
        vertices, faces = tg.read_mesh(bunny)
        extent = (vertices.max(0).values - vertices.min(0).values).max().item()
        grid = tg.GridBatch.from_mesh(tg.JaggedTensor([vertices.to(device)]),
                                      tg.JaggedTensor([faces.to(device)]), voxel_sizes=[extent / 256] * 3)
    else:
        points = torch.nn.functional.normalize(torch.randn(200_000, 3, device=device), dim=1)
        grid = tg.GridBatch.from_points(tg.JaggedTensor([points]), voxel_sizes=[1 / 64] * 3)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo_output", "grid_render.png")
    print(render(grid, out), "->", out)


if __name__ == "__main__":
    main()
