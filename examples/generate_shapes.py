"""Coarse-to-fine generation of sparse voxel grids, in the manner of fVDB's XCube experiments:
an autoencoder whose decoder grows a coarse latent grid into a shape's fine surface voxels.

    python examples/generate_shapes.py [--device cpu|cuda] [--resolution 128] [--steps N]
                                       [--out DIR] [--batch B] [--limit N] [--threads T]

Data: CGAL's 138 test meshes (Debian's libcgal-demo; scripts/fetch_models.sh puts them in
.deps/models/cgal_meshes/). Each mesh is scaled into the unit cube (its longest side R - 2
voxels) and voxelized at R = --resolution voxels across (GridBatch.from_mesh: the voxels its
triangles cross). A seeded draw over the sorted file names holds out 10% of them; meshes that
give no voxels (flat or unreadable files) are left out of either side.

Model (levels 0 = R, 1 = R/2, ..., L = R/2^L, the latent grid):
- encoder: a 3x3x3 convolution on the fine grid's occupancy, then at each level a stride-2
  convolution onto the coarser grid (the fine grid coarsened) and a residual block of two 3x3x3
  convolutions; a linear layer makes the latent features on level L's grid;
- decoder, from level L down to 0: a stride-2 transposed convolution onto the 8 children of
  every voxel (refined_grid(2)), a residual block there (not on level 0's children), and a
  linear head that predicts each child's occupancy; the children it keeps (logit > 0; while
  training, the true ones: teacher forcing) are the next level's grid (pruned_grid), and their
  features go on.
The loss is the binary cross-entropy of every level's children, averaged within each shape
before the shapes (tg.jagged_binary_cross_entropy_with_logits). The latent grid is the shape's
own level-L grid, as in XCube, whose first stage generates that coarse grid.

Held-out shapes are decoded from their own encoding without teacher forcing and scored
against their fine grids: IoU of the voxel sets (tg.voxel_iou) and the Chamfer distance between
voxel centres (tg.voxel_chamfer_distance, in units of the cube's side). The IoU of keeping
every child at every level (the latent grid refined to level 0) is reported beside them, as the
score of a decoder that has learnt nothing. Writes generate_shapes.json (the run: arguments,
environment, split, loss curve, per-shape scores), generate_shapes.png (the first six held-out
shapes, each a framed pair: the true grid left, the decoded one right, each voxel a dot shaded
by depth) and generate_shapes_loss.png to --out. The pictures are drawn with numpy (png.py), so
nothing beyond torch and numpy is needed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

import tilegrid as tg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from png import line_chart, write_png  # noqa: E402

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HELD_OUT = 0.1


def find_meshes() -> Optional[str]:
    """The folder of CGAL's meshes: $TILEGRID_MODELS_DIR/cgal_meshes, then
    .deps/models/cgal_meshes; None when absent."""
    for folder in (os.environ.get("TILEGRID_MODELS_DIR"), os.path.join(_ROOT, ".deps", "models")):
        if folder and os.path.isdir(os.path.join(folder, "cgal_meshes")):
            return os.path.join(folder, "cgal_meshes")
    return None


def split_names(names: Sequence[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, held out): a seeded permutation of the sorted names; the first 10% are held out."""
    names = sorted(names)
    order = torch.randperm(len(names), generator=torch.Generator().manual_seed(seed)).tolist()
    cut = max(1, round(HELD_OUT * len(names)))
    held = sorted(names[i] for i in order[:cut])
    return sorted(set(names) - set(held)), held


def voxelize(path: str, resolution: int, device: torch.device):
    """The mesh's surface voxels at `resolution` across, as a one-grid GridBatch on device (voxel
    size 1 / resolution, voxel (0, 0, 0) centred at 0.5 / resolution: the unit cube), or the
    reason it has none."""
    try:
        vertices, faces = tg.read_mesh(path)
    except tg.MeshFormatError as error:
        return None, f"unreadable: {str(error).split(': ')[-1]}"
    if faces is None or faces.shape[0] == 0:
        return None, "no faces"
    v = vertices.double()
    lo, hi = v.min(0).values, v.max(0).values
    extent = hi - lo
    longest = float(extent.max())
    if not math.isfinite(longest) or longest <= 0:
        return None, "no extent"
    # In voxel units the longest side spans R - 2 voxels from 0.25, and the other sides are
    # centred on it, so no face of an axis-aligned box or a flat mesh lies in a plane between
    # voxels (k + 0.5): from_mesh gives a triangle there no voxel on either side.
    span = resolution - 2
    u = 0.25 + (v - lo) * (span / longest) + (longest - extent) * (span / longest) / 2
    world = ((u + 0.5) / resolution).float()
    grid = tg.GridBatch.from_mesh(tg.JaggedTensor([world.to(device)]),
                                  tg.JaggedTensor([faces.to(device)]), [1.0 / resolution] * 3,
                                  [0.5 / resolution] * 3)
    if grid.total_voxels == 0:
        return None, "no voxels"
    return grid, None


def ijk_of(grid) -> tg.JaggedTensor:
    """grid's voxel coordinates, whether GridBatch.ijk is a method or (as in fVDB) a property."""
    ijk = grid.ijk
    return ijk if isinstance(ijk, tg.JaggedTensor) else ijk()


def batch_of(grids: Sequence) -> "tg.GridBatch":
    """One GridBatch of several one-grid batches that share voxel size and origin."""
    first = grids[0]
    parts = [ijk_of(g).jdata for g in grids]
    return tg.GridBatch.from_ijk(tg.JaggedTensor(parts), voxel_sizes=first.voxel_sizes[0].tolist(),
                                 origins=first.origins[0].tolist())


def pyramid(grid, levels: int) -> list:
    """[grid, grid coarsened by 2, by 4, ...]: levels + 1 grids, finest first."""
    out = [grid]
    for _ in range(levels):
        out.append(out[-1].coarsened_grid(2))
    return out


def occupied(children, truth) -> torch.Tensor:
    """bool [children.total_voxels]: which voxels of `children` are active in `truth` (the
    same level of the same shapes)."""
    return truth.ijk_to_index(ijk_of(children)).jdata >= 0


class _Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = tg.nn.SparseConv3d(channels, channels, 3, bias=False)
        self.norm1 = tg.nn.BatchNorm(channels)
        self.conv2 = tg.nn.SparseConv3d(channels, channels, 3, bias=False)
        self.norm2 = tg.nn.BatchNorm(channels)

    def forward(self, x: tg.JaggedTensor, plan) -> tg.JaggedTensor:
        y = torch.relu(self.norm1(self.conv1(x, plan).jdata))
        y = self.norm2(self.conv2(x.jagged_like(y), plan).jdata)
        return x.jagged_like(torch.relu(y + x.jdata))


class _Step(nn.Module):
    """A strided (or transposed strided) 2x2x2 convolution, BatchNorm, ReLU, and a residual
    block unless block is False."""

    def __init__(self, cin: int, cout: int, transposed: bool, block: bool = True):
        super().__init__()
        conv = tg.nn.SparseConvTranspose3d if transposed else tg.nn.SparseConv3d
        self.conv = conv(cin, cout, 2, 2, bias=False)
        self.norm = tg.nn.BatchNorm(cout)
        self.block = _Residual(cout) if block else None

    def forward(self, x: tg.JaggedTensor, source, target) -> tg.JaggedTensor:
        make = tg.ConvolutionPlan.from_grid_batch_transposed if self.conv.transposed else \
            tg.ConvolutionPlan.from_grid_batch
        y = self.conv(x, make(2, 2, source, target))
        y = y.jagged_like(torch.relu(self.norm(y.jdata)))
        if self.block is None:
            return y
        return self.block(y, tg.ConvolutionPlan.from_grid_batch(3, 1, target, target))


class ShapeAutoencoder(nn.Module):
    """The encoder and the coarse-to-fine decoder of the module's text.

    Args:
        channels: Feature widths from the finest level to the latent one; their count less
            one is the number of levels L (the latent grid is R / 2^L across).
        latent: The latent features' width.
    """

    def __init__(self, channels: Sequence[int] = (8, 8, 16, 32), latent: int = 16):
        super().__init__()
        channels = list(channels)
        self.levels = len(channels) - 1
        self.stem = tg.nn.SparseConv3d(1, channels[0], 3)
        self.down = nn.ModuleList(_Step(a, b, False) for a, b in zip(channels, channels[1:]))
        self.to_latent = nn.Linear(channels[-1], latent)
        widths = [latent] + channels[::-1][1:]  # the decoder's input width at each step
        # No residual block on the finest children (2x the fine voxels): it would cost as much
        # as all other blocks together, and their parents' features carry 3x3x3 context.
        self.up = nn.ModuleList(_Step(a, b, True, block=i + 1 < self.levels)
                                for i, (a, b) in enumerate(zip(widths, widths[1:])))
        self.heads = nn.ModuleList(nn.Linear(b, 1) for b in widths[1:])

    def encode(self, levels: list) -> tg.JaggedTensor:
        """Latent features on levels[-1], from the occupancy of levels[0]."""
        fine = levels[0]
        ones = torch.ones(fine.total_voxels, 1, device=fine.device)
        x = self.stem(tg.JaggedTensor.from_data_and_offsets(ones, fine.voxel_offsets),
                      tg.ConvolutionPlan.from_grid_batch(3, 1, fine, fine))
        x = x.jagged_like(torch.relu(x.jdata))
        for step, source, target in zip(self.down, levels, levels[1:]):
            x = step(x, source, target)
        return x.jagged_like(self.to_latent(x.jdata))

    def decode(self, latent: tg.JaggedTensor, grid, truth: Optional[list] = None):
        """(the fine grid, the loss or None): grows `grid` (the latent grid) level by level.
        truth: the true grids, finest first, for the loss; with it the true children are kept
        (teacher forcing) when the module is training, the predicted ones otherwise."""
        x, losses = latent, []
        for i, (step, head) in enumerate(zip(self.up, self.heads)):
            children = grid.refined_grid(2)
            x = step(x, grid, children)
            logits = head(x.jdata).squeeze(1)
            keep = logits > 0
            if truth is not None:
                target = occupied(children, truth[self.levels - 1 - i])
                losses.append(tg.jagged_binary_cross_entropy_with_logits(
                    tg.JaggedTensor.from_data_and_offsets(logits, children.voxel_offsets), target))
                if self.training:
                    keep = target
            grid = children.pruned_grid(keep)  # rows keep their order: x[keep] are its features
            x = tg.JaggedTensor.from_data_and_offsets(x.jdata[keep], grid.voxel_offsets)
        return grid, (torch.stack(losses).sum() if losses else None)

    def forward(self, levels: list):
        """(decoded fine grid, loss) of a batch given as its grids, finest first."""
        return self.decode(self.encode(levels), levels[-1], levels)


def environment(device: torch.device) -> dict:
    """Where the run ran: processor, threads, versions, the git revision (.deps/REVISION where
    a copied tree has one, as the benchmarks read it, else git's HEAD)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        with open(os.path.join(_ROOT, ".deps", "REVISION")) as f:
            revision = f.read().strip()
    except OSError:
        try:
            revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True,
                                      text=True, check=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=_ROOT, capture_output=True, text=True).stdout.strip()
            revision += "-dirty" if dirty else ""
        except (OSError, subprocess.CalledProcessError):
            revision = "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device), "cpu": cpu, "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "git_revision": revision, "torch": torch.__version__, "tilegrid": tg.__version__,
        "python": platform.python_version(),
    }


def render(grid, size: int = 160) -> np.ndarray:
    """[size, size, 3] uint8: grid 0's voxel centres seen from above a corner, each a dot of
    grey shaded by depth (near is dark), nearer dots drawn over farther ones."""
    img = np.full((size, size, 3), 255, np.uint8)
    if grid.total_voxels == 0:
        return img
    p = grid.voxel_to_world(ijk_of(grid)).jdata.cpu().numpy() - 0.5
    yaw, pitch = math.radians(35), math.radians(25)
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    rot = np.array([[cy, 0, -sy], [0, 1, 0], [sy, 0, cy]])
    tilt = np.array([[1, 0, 0], [0, cp, sp], [0, -sp, cp]])
    q = p @ rot.T @ tilt.T
    scale = size / 1.8  # the unit cube's diagonal is 1.73
    x = np.clip((q[:, 0] * scale + size / 2).astype(int), 0, size - 1)
    y = np.clip((size / 2 - q[:, 1] * scale).astype(int), 0, size - 1)
    depth = q[:, 2]
    near = np.full((size, size), np.inf)
    np.minimum.at(near, (y, x), depth)
    front = depth <= near[y, x]
    shade = 40 + 170 * (depth - depth.min()) / max(float(np.ptp(depth)), 1e-9)
    img[y[front], x[front]] = np.clip(shade[front], 0, 255).astype(np.uint8)[:, None]
    return img


def picture(path: str, pairs: list, size: int = 160, per_row: int = 3) -> None:
    """A PNG of (true grid | decoded grid) pairs, per_row pairs a row, each pair in a grey
    frame."""
    tiles = []
    for truth, decoded in pairs:
        tile = np.concatenate([render(truth, size), render(decoded, size)], 1)
        tile[[0, -1], :] = 150
        tile[:, [0, -1]] = 150
        tiles.append(np.pad(tile, ((6, 6), (6, 6), (0, 0)), constant_values=255))
    tiles += [np.full_like(tiles[0], 255)] * (-len(tiles) % per_row)
    rows = [np.concatenate(tiles[i:i + per_row], 1) for i in range(0, len(tiles), per_row)]
    write_png(path, np.concatenate(rows, 0))


def run(device: torch.device, resolution: int, steps: int, out_dir: Optional[str] = None,
        batch: int = 2, limit: Optional[int] = None, channels: Sequence[int] = (8, 8, 16, 32),
        latent: int = 16, lr: float = 3e-3, seed: int = 0, chamfer_queries: Optional[int] = 4096,
        log=print) -> Optional[dict]:
    """Trains and evaluates; returns the run's record (also written to out_dir) or None when
    the meshes are missing. limit: only the first `limit` meshes of each side (tests)."""
    folder = find_meshes()
    if folder is None:
        log("generate_shapes: no meshes (scripts/fetch_models.sh fetches them); skipped")
        return None
    levels = len(channels) - 1
    if resolution % 2**levels:
        raise ValueError(f"generate_shapes: resolution must be a multiple of {2**levels} "
                         f"({levels} levels), got {resolution}")
    torch.manual_seed(seed)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".off"))
    train_names, held_names = split_names(names, seed)
    if limit is not None:
        train_names, held_names = train_names[:limit], held_names[:limit]
    start = time.perf_counter()
    skipped, shapes = {}, {}
    for name in train_names + held_names:
        grid, why = voxelize(os.path.join(folder, name), resolution, device)
        if grid is None:
            skipped[name] = why
        else:
            shapes[name] = grid
    train = [n for n in train_names if n in shapes]
    held = [n for n in held_names if n in shapes]
    load_seconds = time.perf_counter() - start
    log(f"generate_shapes: {len(names)} meshes in {os.path.normpath(folder)}; {len(train)} "
        f"train, {len(held)} held out at {resolution}^3 ({load_seconds:.1f} s to voxelize; "
        f"{len(skipped)} without voxels)")

    model = ShapeAutoencoder(channels, latent).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=max(steps, 1), pct_start=0.1)
    draw = torch.Generator().manual_seed(seed + 1)
    losses, voxels_seen = [], 0
    start = time.perf_counter()
    model.train()
    for _ in range(steps):
        chosen = [train[i] for i in torch.randint(len(train), (batch,), generator=draw).tolist()]
        grids = pyramid(batch_of([shapes[n] for n in chosen]), levels)
        _, loss = model(grids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        voxels_seen += grids[0].total_voxels
    train_seconds = time.perf_counter() - start

    model.eval()
    per_shape = {}
    pairs = []
    start = time.perf_counter()
    with torch.no_grad():
        for name in held:
            grids = pyramid(shapes[name], levels)
            decoded, loss = model(grids)
            everything = grids[-1]
            for _ in range(levels):
                everything = everything.refined_grid(2)
            chamfer = float(tg.voxel_chamfer_distance(
                decoded, grids[0], max_queries=chamfer_queries,
                generator=torch.Generator().manual_seed(seed))[0])
            per_shape[name] = {
                "voxels": grids[0].total_voxels, "decoded_voxels": decoded.total_voxels,
                "latent_voxels": grids[-1].total_voxels, "loss": float(loss),
                "iou": float(tg.voxel_iou(decoded, grids[0])[0]),
                "chamfer": chamfer if math.isfinite(chamfer) else None,  # None: nothing decoded
                "iou_keeping_every_child": float(tg.voxel_iou(everything, grids[0])[0]),
            }
            pairs.append((grids[0], decoded))
    eval_seconds = time.perf_counter() - start

    def mean(key):
        values = [s[key] for s in per_shape.values() if s[key] is not None]
        return sum(values) / len(values) if values else None

    chamfer = mean("chamfer")
    result = {
        "example": "examples/generate_shapes.py",
        "environment": environment(device),
        "arguments": {"resolution": resolution, "steps": steps, "batch": batch, "limit": limit,
                      "channels": list(channels), "latent": latent, "levels": levels, "lr": lr,
                      "seed": seed, "chamfer_queries": chamfer_queries},
        "data": {"folder": os.path.relpath(folder, _ROOT), "meshes": len(names),
                 "train": train, "held_out": held, "skipped": skipped},
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": {"voxelize": load_seconds, "train": train_seconds, "evaluate": eval_seconds},
        "train_shapes_per_second": steps * batch / train_seconds if train_seconds else None,
        "train_fine_voxels_per_second": voxels_seen / train_seconds if train_seconds else None,
        "losses": losses,
        "held_out": {"iou": mean("iou"),
                     "iou_keeping_every_child": mean("iou_keeping_every_child"),
                     "chamfer": chamfer,  # over the shapes with a voxel decoded
                     "chamfer_voxels": None if chamfer is None else chamfer * resolution,
                     "nothing_decoded": sum(s["decoded_voxels"] == 0 for s in per_shape.values()),
                     "shapes": per_shape},
    }
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        result["json"] = os.path.join(out_dir, "generate_shapes.json")
        if pairs:
            result["picture"] = os.path.join(out_dir, "generate_shapes.png")
            picture(result["picture"], pairs[:6])
        if losses:
            result["loss_picture"] = os.path.join(out_dir, "generate_shapes_loss.png")
            line_chart(result["loss_picture"], [losses])
        with open(result["json"], "w") as f:
            json.dump(result, f, indent=1)
    h = result["held_out"]
    chamfer = "none decoded" if h["chamfer"] is None else \
        f"{h['chamfer']:.4f} of the cube ({h['chamfer_voxels']:.2f} voxels)"
    log(f"generate_shapes ({device}, {resolution}^3, {levels} levels): {steps} steps of {batch} in "
        f"{train_seconds:.1f} s, loss {losses[0] if losses else math.nan:.3f} -> "
        f"{losses[-1] if losses else math.nan:.3f}; held out ({len(held)} shapes): IoU "
        f"{h['iou']:.3f} (keeping every child: {h['iou_keeping_every_child']:.3f}), Chamfer "
        f"{chamfer}, nothing decoded for {h['nothing_decoded']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--resolution", type=int, default=None,
                        help="voxels across (default: 128 on the CPU, 256 on a GPU)")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps (default: 200 on the CPU, 2000 on a GPU)")
    parser.add_argument("--batch", type=int, default=2, help="shapes a step")
    parser.add_argument("--limit", type=int, default=None, help="use only this many meshes a side")
    parser.add_argument("--channels", type=int, nargs="+", default=[8, 8, 16, 32],
                        help="feature widths, finest level first; their count less one is the "
                             "number of levels")
    parser.add_argument("--latent", type=int, default=16, help="the latent features' width")
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads")
    parser.add_argument("--out", default=os.path.join(_ROOT, "demo_output"))
    args = parser.parse_args()
    gpu = torch.cuda.is_available() and tg.with_cuda
    device = torch.device(args.device or ("cuda" if gpu else "cpu"))
    if args.threads:
        torch.set_num_threads(args.threads)
    resolution = args.resolution or (128 if device.type == "cpu" else 256)
    steps = args.steps if args.steps is not None else (200 if device.type == "cpu" else 2000)
    run(device, resolution, steps, out_dir=args.out, batch=args.batch, limit=args.limit,
        channels=args.channels, latent=args.latent)


if __name__ == "__main__":
    main()
