"""Sparse voxel grids on the GPU: construction, lookup, trilinear sampling and splatting,
tilegrid vs the torch-only baseline (grid_torch_baseline.py: torch.unique + searchsorted) and
fVDB when it imports, in one run.

    python bench/bench_grid.py --out results.json [--model path/to/bunny00.off]

Inputs:
- 10M random points, uniform in [-1, 1]^3, voxel size 2/512 (~9.6M voxels: a sparse cloud);
- the Stanford Bunny (CGAL's data/meshes/bunny00.off from Debian's libcgal-demo; fetched by
  scripts/fetch_models.sh): its mesh voxelized at 1024 and 2048 voxels across (from_mesh),
  and 10M points sampled on its surface (from_points, lookups, sampling, splatting).
Rates are points (or queries) per second from device-event times. Everything is timed launch
by launch, as users call it: construction reads counts back to the host and the jagged
arguments are validated on the host, so these calls cannot be captured in a CUDA graph.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import harness  # noqa: E402
from grid_torch_baseline import SortedVoxels, ijk_of, keys_of  # noqa: E402
from sample_models import find_bunny, sample_surface  # noqa: E402

import tilegrid as tg  # noqa: E402

N_POINTS = 10_000_000
CHANNELS = 32


def fvdb_systems(report: harness.Report):
    """fVDB's calls for the same operations, or None (with the reason recorded)."""
    fvdb, error = harness.optional_import("fvdb")
    if fvdb is None:
        report.checks["fvdb"] = f"not measured: {error}"
        return None
    report.checks["fvdb"] = f"fvdb {getattr(fvdb, '__version__', '?')}"
    return fvdb


def rate(n: int):
    return lambda _name, ms: {"items_per_s": n / (ms * 1e-3)}


def bench_construction(report, fvdb, problem, points, voxel, origin=0.0):
    jt = tg.JaggedTensor([points])
    systems = [
        ("tilegrid from_points", lambda _: tg.GridBatch.from_points(jt, voxel_sizes=[voxel] * 3, origins=[origin] * 3)),
        ("torch unique (baseline)", lambda _: SortedVoxels.from_points(points, voxel, origin)),
    ]
    if fvdb is not None:
        fj = fvdb.JaggedTensor([points])
        systems.append(("fVDB from_points", lambda _: fvdb.GridBatch.from_points(fj, voxel_sizes=voxel, origins=origin)))
    harness.run_each(report, "build from points", problem, None, systems, sets=1, graph=False, iters=20,
                     extra=rate(points.shape[0]))
    grid = tg.GridBatch.from_points(jt, voxel_sizes=[voxel] * 3, origins=[origin] * 3)
    base = SortedVoxels.from_points(points, voxel, origin)
    # Same voxel set as the baseline, in the same run.
    ours = torch.sort(keys_of(grid.ijk.jdata)).values
    report.checks[f"{problem}: voxels (tilegrid, baseline)"] = [grid.total_voxels, base.keys.numel()]
    report.checks[f"{problem}: same voxel set as the baseline"] = bool(torch.equal(ours, base.keys))
    report.checks[f"{problem}: tilegrid bytes per voxel"] = grid.bytes_per_voxel
    report.checks[f"{problem}: baseline bytes per voxel"] = 8.0
    return grid, base


def bench_queries(report, problem, grid, base, points, voxel):
    # Lookups: the voxels of the points (all present) and the same shifted by one voxel in i
    # (about half absent on a surface).
    ijk = torch.round(points / voxel).to(torch.int32)
    queries = torch.cat([ijk, ijk + torch.tensor([1, 0, 0], device=ijk.device, dtype=torch.int32)])
    jq = tg.JaggedTensor([queries])
    harness.run_each(report, "ijk_to_index", problem, None, [
        ("tilegrid ijk_to_index", lambda _: grid.ijk_to_index(jq)),
        ("torch searchsorted (baseline)", lambda _: base.ijk_to_index(queries)),
    ], sets=1, graph=False, iters=50, extra=rate(queries.shape[0]))
    ours, theirs = grid.ijk_to_index(jq).jdata, base.ijk_to_index(queries)
    found = ours >= 0
    report.checks[f"{problem}: lookup presence agrees"] = bool(torch.equal(found, theirs >= 0))
    report.checks[f"{problem}: lookup rows name the queried voxel"] = bool(
        torch.equal(grid.ijk.jdata[ours[found]], queries[found]))
    report.checks[f"{problem}: fraction of lookups present"] = found.float().mean().item()

    # Sampling and splatting of CHANNELS float32 features at the points.
    features = torch.randn(grid.total_voxels, CHANNELS, device="cuda")
    # The baseline's rows are in key order; give it the same feature of each voxel.
    rows = grid.ijk_to_index(tg.JaggedTensor([ijk_of(base.keys).to(torch.int32)])).jdata
    base_features = features[rows]
    jp = tg.JaggedTensor([points])
    values = torch.randn(points.shape[0], CHANNELS, device="cuda")
    harness.run_each(report, f"sample_trilinear C={CHANNELS}", problem, None, [
        ("tilegrid sample_trilinear", lambda _: grid.sample_trilinear(jp, features)),
        ("torch gather (baseline)", lambda _: base.sample_trilinear(points, base_features)),
    ], sets=1, graph=False, iters=20, extra=rate(points.shape[0]))
    got = grid.sample_trilinear(jp, features).jdata
    want = base.sample_trilinear(points, base_features)
    report.checks[f"{problem}: sample max abs diff vs baseline"] = (got - want).abs().max().item()
    harness.run_each(report, f"splat_trilinear C={CHANNELS}", problem, None, [
        ("tilegrid splat_trilinear", lambda _: grid.splat_trilinear(jp, values)),
        ("torch index_add (baseline)", lambda _: base.splat_trilinear(points, values)),
    ], sets=1, graph=False, iters=20, extra=rate(points.shape[0]))
    got = grid.splat_trilinear(jp, values).jdata[rows]
    want = base.splat_trilinear(points, values)
    report.checks[f"{problem}: splat max abs diff vs baseline"] = (got - want).abs().max().item()


def bench_mesh(report, fvdb, vertices, faces, name):
    extent = (vertices.max(0).values - vertices.min(0).values).max().item()
    jv, jf = tg.JaggedTensor([vertices]), tg.JaggedTensor([faces])
    for res in (1024, 2048):
        voxel = extent / res
        problem = f"{name} mesh, {res} voxels across"
        systems = [("tilegrid from_mesh", lambda _: tg.GridBatch.from_mesh(jv, jf, voxel_sizes=[voxel] * 3))]
        if fvdb is not None:
            fv, ff = fvdb.JaggedTensor([vertices]), fvdb.JaggedTensor([faces])
            systems.append(("fVDB from_mesh", lambda _: fvdb.GridBatch.from_mesh(fv, ff, voxel_sizes=voxel)))
        harness.run_each(report, "build from mesh", problem, None, systems, sets=1, graph=False, iters=10,
                         extra=rate(faces.shape[0]))
        grid = tg.GridBatch.from_mesh(jv, jf, voxel_sizes=[voxel] * 3)
        report.checks[f"{problem}: voxels"] = grid.total_voxels
        report.checks[f"{problem}: tilegrid bytes per voxel"] = grid.bytes_per_voxel
        if res == 1024:  # the CPU build of the same grid, for scale and for equality
            cpu = tg.GridBatch.from_mesh(jv.to("cpu"), jf.to("cpu"), voxel_sizes=[voxel] * 3)
            report.checks[f"{problem}: GPU grid equals the CPU grid"] = bool(
                torch.equal(grid.ijk.jdata.cpu(), cpu.ijk.jdata))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default=None, help="mesh file (default: the Stanford Bunny)")
    args = parser.parse_args()
    torch.manual_seed(0)

    report = harness.Report("grid")
    report.measure_ceilings()
    fvdb = fvdb_systems(report)

    points = torch.rand(N_POINTS, 3, device="cuda") * 2 - 1
    grid, base = bench_construction(report, fvdb, "10M random points, voxel 2/512", points, 2 / 512)
    bench_queries(report, "10M random points, voxel 2/512", grid, base, points, 2 / 512)
    del grid, base, points
    torch.cuda.empty_cache()

    path = args.model or find_bunny()
    if path is None:
        report.checks["model"] = "not measured: no model file (run scripts/fetch_models.sh)"
    else:
        vertices, faces = tg.read_mesh(path)
        report.checks["model"] = f"{os.path.basename(path)}: {vertices.shape[0]} vertices, {faces.shape[0]} triangles"
        vertices, faces = vertices.cuda(), faces.cuda()
        name = os.path.splitext(os.path.basename(path))[0]
        bench_mesh(report, fvdb, vertices, faces, name)
        extent = (vertices.max(0).values - vertices.min(0).values).max().item()
        surface = sample_surface(vertices, faces, N_POINTS)
        voxel = extent / 1024
        problem = f"10M points on {name}, 1024 across"
        grid, base = bench_construction(report, fvdb, problem, surface, voxel)
        bench_queries(report, problem, grid, base, surface, voxel)

    report.write(args.out)
    print(report.table())


if __name__ == "__main__":
    main()
