"""Rays through the Stanford Bunny's grid (GridBatch.from_mesh, 1024 and 2048 voxels across):
1M camera rays (1024 x 1024, the demo's camera) through voxels_along_rays (every voxel a ray
crosses, and the first one) and segments_along_rays, against a torch baseline that finds
first hits by dense stepping (half a voxel a step, GridBatch.ijk_to_index on every step; run
on every 16th ray and scaled).

    python bench/bench_rays.py --out results.json [--across 1024 2048] [--iters 5]

Time: CUDA events around each call, median of --iters after one warm-up (each call includes
its one synchronisation to size the outputs). Reported: rays/s and voxel intersections/s
(voxels listed per second). Without the bunny (scripts/fetch_models.sh) a sphere is used.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import harness  # noqa: E402
from render_grid import camera_rays  # noqa: E402
from sample_models import find_bunny  # noqa: E402

import tilegrid as tg  # noqa: E402


def timed(fn, iters: int):
    """(median ms, output): one call as the warm-up that also gives the output, then
    harness.time_ms over `iters` calls."""
    out = fn()
    return harness.time_ms(lambda _: fn(), sets=1, warmup=0, iters=iters), out


def dense_first_hits(grid, o, d, t_near: float, t_far: float, step: float, chunk: int = 1024):
    """First t in [t_near, t_far) at which o + t d lands in an active voxel, stepping by
    `step`; -1 where none."""
    size, origin = grid.voxel_sizes[0].to(o), grid.origins[0].to(o)
    steps = torch.arange(t_near, t_far, step, device=o.device, dtype=o.dtype)
    first = torch.full((o.shape[0],), -1.0, device=o.device, dtype=o.dtype)
    for s in range(0, o.shape[0], chunk):
        p = o[s:s + chunk, None, :] + steps[None, :, None] * d[s:s + chunk, None, :]
        ijk = torch.round((p - origin) / size).to(torch.int32).reshape(-1, 3)
        rows = grid.ijk_to_index(tg.JaggedTensor([ijk])).jdata.reshape(p.shape[0], -1)
        hit = rows >= 0
        idx = torch.where(hit.any(1), hit.int().argmax(1), -1)
        first[s:s + chunk] = torch.where(idx >= 0, steps[idx.clamp(min=0)], first[s:s + chunk])
    return first


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--across", type=int, nargs="*", default=[1024, 2048])
    parser.add_argument("--pixels", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    report = harness.Report("rays")
    device = torch.device("cuda")
    bunny = find_bunny()
    for across in args.across:
        if bunny is not None:
            vertices, faces = tg.read_mesh(bunny)
            extent = (vertices.max(0).values - vertices.min(0).values).max().item()
            grid = tg.GridBatch.from_mesh(tg.JaggedTensor([vertices.to(device)]),
                                          tg.JaggedTensor([faces.to(device)]), voxel_sizes=[extent / across] * 3)
            scene = f"bunny {across}"
        else:
            pts = torch.nn.functional.normalize(torch.randn(4_000_000, 3, device=device), dim=1)
            grid = tg.GridBatch.from_points(tg.JaggedTensor([pts]), voxel_sizes=[2 / across] * 3)
            scene = f"sphere {across}"
        ijk = grid.ijk.jdata.double()
        size, origin = grid.voxel_sizes[0].double(), grid.origins[0].double()
        lo, hi = origin + size * (ijk.min(0).values.cpu() - 0.5), origin + size * (ijk.max(0).values.cpu() + 0.5)
        centre, radius = (lo + hi) / 2, float((hi - lo).norm() / 2)
        o, d = (t.to(device) for t in camera_rays(centre, radius, args.pixels, args.pixels))
        rays = o.shape[0]
        problem = f"{scene}, {rays // 1000}k rays"
        runs = [
            ("voxels (all, <= 8192 a ray)", lambda: grid.voxels_along_rays(o, d, max_voxels=8192)),
            ("voxels (first hit)", lambda: grid.voxels_along_rays(o, d, max_voxels=1)),
            ("segments (all, <= 8192)", lambda: grid.segments_along_rays(o, d, max_segments=8192)),
        ]
        first_t = None
        for op, fn in runs:
            ms, out = timed(fn, args.iters)
            listed = (out[0] if isinstance(out, tuple) else out).jdata.shape[0]
            if op == "voxels (first hit)":
                hit = out[1].joffsets.diff() > 0
                first_t = torch.full((rays,), -1.0, device=device, dtype=torch.float64)
                first_t[hit] = out[1].jdata[:, 0]
            report.add(harness.Result(op, problem, "tilegrid", ms, extra={
                "rays_per_s": rays / (ms * 1e-3), "listed": listed,
                "intersections_per_s": listed / (ms * 1e-3), "voxels": grid.total_voxels}))
        # The baseline on every 16th ray (its cost grows with the steps, not the hits), from the
        # camera's distance to the box (2 radii) to past it (4 radii); its time is scaled to
        # all the rays in rays_per_s and median_ms.
        step = 0.5 * float(size.min())
        sub = slice(None, None, 16)
        ms, dense = timed(lambda: dense_first_hits(grid, o[sub], d[sub], 2 * radius, 4 * radius, step), 1)
        scale = rays / o[sub].shape[0]
        report.add(harness.Result("voxels (first hit)", problem, "torch dense stepping", ms * scale, extra={
            "rays_per_s": rays / (ms * scale * 1e-3), "step_voxels": 0.5, "rays_run": o[sub].shape[0],
            "measured_ms": ms, "steps_per_ray": int(2 * radius / step)}))
        first_t = first_t[sub]
        both = (first_t >= 0) & (dense >= 0)
        report.checks[f"{problem}: rays hit (tilegrid, dense)"] = [int((first_t >= 0).sum()), int((dense >= 0).sum())]
        report.checks[f"{problem}: max |t_dense - t_first| in voxels"] = (
            float(((dense - first_t)[both].abs().max() / size.min()).item()) if both.any() else None)
        print(report.table())
    report.write(args.out)


if __name__ == "__main__":
    main()
