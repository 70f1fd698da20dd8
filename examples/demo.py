"""tilegrid demo: runs every operator that exists on the GPU when there is one (else the
CPU) and prints, for each, the device, the error against a float64 reference, and the
median time. Grows as the pillars land.

    python examples/demo.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import tilegrid as tg
import reconstruct_tsdf
import render_grid
import scan_segmentation
import train_llama
from sample_models import find_bunny


def median_ms(fn, device: torch.device, repeats: int = 20) -> float:
    """Median wall time of fn in ms; on the GPU from CUDA events around each call."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, the norm-wise relative error."""
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-300)).item()


def demo_rms_norm(device: torch.device) -> list[tuple]:
    rows, hidden = (32768, 4096) if device.type == "cuda" else (512, 1024)
    x = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16).requires_grad_()
    dy = torch.randn_like(x)

    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = F.rms_norm(x64, (hidden,), w64, 1e-6)
    dx64, dw64 = torch.autograd.grad(y64, (x64, w64), dy.double())

    y = tg.rms_norm(x, w, 1e-6)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    shape = f"[{rows}, {hidden}] bf16"
    fwd = median_ms(lambda: tg.rms_norm(x, w, 1e-6), device)
    fwd_bwd = median_ms(lambda: torch.autograd.grad(tg.rms_norm(x, w, 1e-6), (x, w), dy), device)
    return [
        ("rms_norm forward", shape, rel_err(y, y64), fwd),
        ("rms_norm forward+backward", shape, max(rel_err(dx, dx64), rel_err(dw, dw64)), fwd_bwd),
    ]


def demo_jagged_tensor(device: torch.device) -> list[tuple]:
    sizes = torch.randint(0, 100_000, (64,)).tolist()
    j = tg.JaggedTensor([torch.randn(n, 3, device=device) for n in sizes])
    ref = torch.repeat_interleave(torch.arange(64), torch.tensor(sizes))
    err = float((j.jidx.cpu().long() != ref).sum().item())  # wrong entries: must be 0

    def fresh_jidx():
        j._jidx = None
        return j.jidx

    return [("JaggedTensor.jidx", f"{j.jdata.shape[0]} rows, 64 tensors", err, median_ms(fresh_jidx, device))]


def demo_attention(device: torch.device) -> list[tuple]:
    # On a GPU the CUDA flash kernels (the Hopper forward on an H100/H200; the backward on the
    # portable kernel everywhere for now), on the CPU the reference.
    shape = (2, 4096, 16, 128) if device.type == "cuda" else (1, 512, 4, 64)
    q, k, v = (torch.randn(*shape, dtype=torch.bfloat16, device=device) for _ in range(3))
    out = tg.flash_attn_func(q, k, v, causal=True)
    q64, k64, v64 = (t.double().transpose(1, 2) for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    ms = median_ms(lambda: tg.flash_attn_func(q, k, v, causal=True), device, repeats=3 if device.type == "cpu" else 20)
    rows = [("flash_attn_func (causal)", f"{list(shape)} bf16", rel_err(out, ref.transpose(1, 2)), ms)]

    # Forward + backward, as a training step takes them, against float64 autograd.
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(tg.flash_attn_func(q, k, v, causal=True), (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().transpose(1, 2).requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    refs = torch.autograd.grad(ref, (q64, k64, v64), dout.double().transpose(1, 2))
    err = max(rel_err(g, r.transpose(1, 2)) for g, r in zip((dq, dk, dv), refs))
    step = lambda: torch.autograd.grad(tg.flash_attn_func(q, k, v, causal=True), (q, k, v), dout)  # noqa: E731
    rows.append(("flash_attn fwd+bwd (causal)", f"{list(shape)} bf16", err,
                 median_ms(step, device, repeats=3 if device.type == "cpu" else 5)))
    return rows


def demo_grid_batch(device: torch.device) -> list[tuple]:
    """A sparse grid from the Stanford Bunny's mesh (1024 voxels across) when the model is
    there (scripts/fetch_models.sh), else from points on a sphere; then every voxel looked up,
    and the grid rendered by tilegrid's ray marcher to demo_output/grid_render.png."""
    path = find_bunny()
    if path is not None:
        vertices, faces = tg.read_mesh(path)
        extent = (vertices.max(0).values - vertices.min(0).values).max().item()
        jv, jf = tg.JaggedTensor([vertices.to(device)]), tg.JaggedTensor([faces.to(device)])
        voxel = extent / 1024

        def build():
            return tg.GridBatch.from_mesh(jv, jf, voxel_sizes=[voxel] * 3)

        name = f"{os.path.basename(path)} ({faces.shape[0]} triangles), 1024 across"
    else:
        print("demo: no model file (scripts/fetch_models.sh fetches it); using points on a sphere")
        directions = torch.nn.functional.normalize(torch.randn(800_000, 3, device=device), dim=1)
        points = tg.JaggedTensor([directions])

        def build():
            return tg.GridBatch.from_points(points, voxel_sizes=[1 / 200] * 3)

        name = "800k points on a sphere, radius 200 voxels"
    grid = build()
    index = grid.ijk_to_index(grid.ijk)
    wrong = float((index.jdata != torch.arange(grid.total_voxels, device=device)).sum().item())
    ms = median_ms(build, device, repeats=5)
    print(f"grid: {name}: {grid.total_voxels} voxels, {grid.tree_bytes / 2**20:.1f} MiB "
          f"({grid.bytes_per_voxel:.2f} B/voxel), built on {device} in {ms:.2f} ms")
    op = "GridBatch.from_mesh" if path is not None else "GridBatch.from_points"
    picture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo_output", "grid_render.png")
    shot = render_grid.render(grid, picture)
    print(f"render: {shot['rays']} camera rays marched through the grid, {shot['hits']} hit; "
          f"picture in demo_output/grid_render.png")
    return [(op, f"{grid.total_voxels} voxels", wrong, ms),
            ("voxels_along_rays (render)", f"{shot['rays']} rays, first hits", float(shot["wrong"]),
             1e3 * shot["seconds"])]


def demo_scan_segmentation(device: torch.device) -> list[tuple]:
    """Trains the sparse U-Net on a real aerial LiDAR scan (scan_segmentation.py): on the GPU
    300 steps of a (32, 64, 128)-channel net, on the CPU 60 steps of an (8, 16, 32) one. Writes
    the loss curve to demo_output/scan_segmentation_loss.png."""
    cuda = device.type == "cuda"
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo_output")
    result = scan_segmentation.train(device, 300 if cuda else 60, channels=(32, 64, 128) if cuda else (8, 16, 32),
                                     lr=5e-3 if cuda else 1e-2, out_dir=out_dir)
    if result is None:
        return []
    ms = 1e3 * result["seconds"] / result["steps"]
    return [("SparseUNet train step", f"{result['voxels']} voxels, scan", 1 - result["test"]["accuracy"], ms)]


def demo_llama_training(device: torch.device) -> list[tuple]:
    """Trains a small Llama on the Python standard library's sources (train_llama.py) with
    tilegrid's modules and, from the same weights and batches, in plain PyTorch (bf16 and
    float32): on the GPU 4 layers of d 512 for 150 steps, on the CPU 2 layers of d 128 for 40.
    Writes the loss curves to demo_output/llama_training_loss.png."""
    cuda = device.type == "cuda"
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo_output")
    result = train_llama.train(device, "small" if cuda else "tiny", 150 if cuda else 40, out_dir)
    print(train_llama.summary(result))
    ours, ref = result["runs"]["tilegrid_bf16"], result["runs"]["torch_bf16"]
    tokens = result["config"]["batch"] * result["config"]["seq"]
    return [("Llama train step (tg.nn)", f"{result['parameters'] / 1e6:.1f}M params, {tokens} tok",
             abs(ours["losses"][-1] - ref["losses"][-1]) / ref["losses"][-1], 1e3 * tokens / ours["tokens_per_s"])]


def demo_tsdf(device: torch.device) -> list[tuple]:
    """The bunny's grid rendered to ten depth images, fused by integrate_tsdf, meshed by
    marching_cubes (reconstruct_tsdf.py; 1024 across on the GPU, 128 on the CPU); the error is
    the mesh's Chamfer distance to the original in units of the bunny's extent. Writes
    demo_output/tsdf_reconstruction.png."""
    path = find_bunny()
    if path is None:
        return []
    vertices, faces = tg.read_mesh(path)
    cuda = device.type == "cuda"
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo_output")
    r = reconstruct_tsdf.reconstruct(vertices, faces, device, 1024 if cuda else 128, 512 if cuda else 128,
                                     out_dir=out_dir)
    print(f"tsdf: {r['views']} depth images fused into {r['tsdf_voxels']} voxels, meshed to {r['mesh_faces']} "
          f"triangles; Chamfer distance {r['chamfer_in_tsdf_voxels']:.2f} TSDF voxels; picture in "
          f"demo_output/tsdf_reconstruction.png")
    return [("TSDF fusion + meshing", f"bunny {r['across']}, {r['views']} views", r["chamfer_relative_to_extent"],
             1e3 * r["fuse_and_mesh_seconds"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    args = parser.parse_args()
    name = args.device or ("cuda" if torch.cuda.is_available() and tg.with_cuda else "cpu")
    device = torch.device(name)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"tilegrid {tg.__version__} demo on {device} ({where}); CUDA kernels built: {tg.with_cuda}")
    rows = demo_rms_norm(device) + demo_jagged_tensor(device) + demo_attention(device)
    rows += demo_llama_training(device) + demo_grid_batch(device) + demo_tsdf(device)
    rows += demo_scan_segmentation(device)
    print(f"{'operator':28} {'problem':28} {'device':8} {'error':>10} {'time ms':>9}")
    for op, problem, err, ms in rows:
        print(f"{op:28} {problem:28} {str(device):8} {err:10.2e} {ms:9.3f}")
    print("error: norm-wise relative error against float64 torch (rms_norm, attention); "
          "wrong entries (jidx, grid lookups of every active voxel; ray hits whose entry point "
          "is off the listed voxel's surface); the Llama's last loss against plain PyTorch's "
          "(relative); the TSDF mesh's Chamfer distance to the bunny (relative to its size); "
          "held-out error rate (1 - accuracy) of the scan segmentation")


if __name__ == "__main__":
    main()
