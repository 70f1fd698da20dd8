"""Semantic segmentation of a real aerial LiDAR scan with tilegrid's sparse U-Net.

    python examples/scan_segmentation.py [--device cpu|cuda] [--steps N] [--out DIR]

Data: CGAL's b9_training.ply (Debian's libcgal-demo; scripts/fetch_models.sh puts it in
.deps/models/): 22,300 points of an aerial scan of buildings, 2,447 of them labelled ground (0),
vegetation (1) or roof (2). Its colours paint the labels (each class one colour), so they are
not used: the network sees geometry only (each voxel's height above the scan's lowest point and
its point count).

The points are voxelized at 1 m (13k voxels); a SparseUNet (three levels: 1, 2 and 4 m) predicts
a class a voxel, trained with cross-entropy on the voxels that hold training points. Labelled
points are split into training and held-out sets by 10 m blocks of the ground plane (so a
held-out point does not share its voxel or its block with a training point); accuracy and mean
IoU are reported on the held-out points, each taking its voxel's prediction. The loss curve is
written as a PNG.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

import tilegrid as tg
from png import line_chart

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CLASSES = ("ground", "vegetation", "roof")


def find_scan() -> Optional[str]:
    """Path of b9_training.ply: $TILEGRID_MODELS_DIR, then .deps/models; None when absent."""
    for folder in (os.environ.get("TILEGRID_MODELS_DIR"), os.path.join(_ROOT, ".deps", "models")):
        if folder and os.path.isfile(os.path.join(folder, "b9_training.ply")):
            return os.path.join(folder, "b9_training.ply")
    return None


def read_labelled_ply(path: str):
    """(xyz float64 [N, 3], label int64 [N]; -1 = unlabelled) of a binary little-endian PLY whose
    vertices have double x, y, z, uchar red, green, blue and int label (CGAL's training sets)."""
    raw = open(path, "rb").read()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = raw[:end].decode("ascii", "replace").split("\n")
    props = [line.split()[1:] for line in header if line.startswith("property")]
    want = [["double", "x"], ["double", "y"], ["double", "z"], ["uchar", "red"], ["uchar", "green"],
            ["uchar", "blue"], ["int", "label"]]
    if "format binary_little_endian 1.0" not in header or props != want:
        raise ValueError(f"{path}: expected a binary little-endian PLY with {want}, got {props}")
    dt = np.dtype([("x", "<f8"), ("y", "<f8"), ("z", "<f8"), ("r", "u1"), ("g", "u1"), ("b", "u1"), ("label", "<i4")])
    table = np.frombuffer(raw[end:], dtype=dt)
    xyz = np.stack([table["x"], table["y"], table["z"]], 1)
    return torch.from_numpy(xyz.copy()), torch.from_numpy(table["label"].astype(np.int64))


def block_split(xyz: torch.Tensor, labels: torch.Tensor, block: float = 10.0, held_out: float = 0.3,
                seed: int = 0):
    """Boolean masks (train, test) over the labelled points: whole block x block metre columns
    go to the test set (a seeded draw, redrawn until each class has 15-50% of its points held
    out)."""
    cell = torch.floor((xyz[:, :2] - xyz[:, :2].min(0).values) / block).long()
    key = cell[:, 0] * 100_000 + cell[:, 1]
    blocks = torch.unique(key)
    g = torch.Generator().manual_seed(seed)
    for _ in range(1000):
        chosen = blocks[torch.rand(blocks.numel(), generator=g) < held_out]
        test = torch.isin(key, chosen) & (labels >= 0)
        train = ~torch.isin(key, chosen) & (labels >= 0)
        share = [float(test[labels == c].sum()) / max(int((labels == c).sum()), 1) for c in range(len(CLASSES))]
        if all(0.15 <= s <= 0.5 for s in share):
            return train, test
    raise RuntimeError("block_split: no split holds out 15-50% of every class")


def voxelize(xyz: torch.Tensor, voxel: float, device: torch.device):
    """(grid, features [V, 3], row of each point's voxel): features = 1, height above the lowest
    point / 20 m, and log(1 + points in the voxel)."""
    local = xyz - xyz.min(0).values
    points = tg.JaggedTensor([local.to(device)])
    grid = tg.GridBatch.from_points(points, voxel_sizes=[voxel] * 3)
    rows = grid.points_to_index(points).jdata
    centres = grid.voxel_to_world(grid.ijk).jdata
    count = torch.bincount(rows, minlength=grid.total_voxels).to(centres)
    features = torch.stack([torch.ones_like(count), centres[:, 2] / 20.0, torch.log1p(count)], 1)
    return grid, features.float(), rows


def majority_labels(rows: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, voxels: int) -> torch.Tensor:
    """Each voxel's most frequent label among the masked points (-100, ignored, where none)."""
    votes = torch.zeros(voxels, len(CLASSES), device=rows.device)
    votes.index_put_((rows[mask], labels[mask]), torch.ones(int(mask.sum()), device=rows.device), accumulate=True)
    out = votes.argmax(1)
    out[votes.sum(1) == 0] = -100
    return out


def scores(pred: torch.Tensor, truth: torch.Tensor) -> dict:
    iou = []
    for c in range(len(CLASSES)):
        inter = int(((pred == c) & (truth == c)).sum())
        union = int(((pred == c) | (truth == c)).sum())
        iou.append(inter / union if union else float("nan"))
    return {"accuracy": float((pred == truth).float().mean()), "mean_iou": float(np.nanmean(iou)),
            "iou": dict(zip(CLASSES, iou))}


def train(device: torch.device, steps: int, channels=(32, 64, 128), voxel: float = 1.0, lr: float = 5e-3,
          out_dir: Optional[str] = None, seed: int = 0, log=print) -> Optional[dict]:
    path = find_scan()
    if path is None:
        log("scan segmentation: no b9_training.ply (scripts/fetch_models.sh fetches it); skipped")
        return None
    torch.manual_seed(seed)
    xyz, labels = read_labelled_ply(path)
    train_mask, test_mask = block_split(xyz, labels)
    grid, features, rows = voxelize(xyz, voxel, device)
    labels_d, train_d = labels.to(device), train_mask.to(device)
    targets = majority_labels(rows, labels_d, train_d, grid.total_voxels)
    data = tg.JaggedTensor.from_data_and_offsets(features, grid.voxel_offsets)
    net = tg.nn.SparseUNet(features.shape[1], len(CLASSES), channels=channels).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    # Class weights against the imbalance (ground has 5x the vegetation's points).
    counts = torch.bincount(targets[targets >= 0], minlength=len(CLASSES)).float()
    weight = (counts.sum() / counts.clamp(min=1)) / len(CLASSES)
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        logits = net(data, grid).jdata
        loss = F.cross_entropy(logits, targets, weight=weight, ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    elapsed = time.perf_counter() - start
    net.eval()
    with torch.no_grad():
        pred = net(data, grid).jdata.argmax(1)[rows]
    result = {
        "points": xyz.shape[0], "voxels": grid.total_voxels, "train_points": int(train_mask.sum()),
        "test_points": int(test_mask.sum()), "steps": steps, "seconds": elapsed,
        "first_loss": losses[0], "final_loss": losses[-1],
        "train": scores(pred[train_d], labels_d[train_d]),
        "test": scores(pred[test_mask.to(device)], labels_d[test_mask.to(device)]),
    }
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        result["loss_png"] = os.path.join(out_dir, "scan_segmentation_loss.png")
        line_chart(result["loss_png"], [losses])
    t = result["test"]
    log(f"scan segmentation ({os.path.basename(path)}, {result['points']} points, {result['voxels']} voxels "
        f"of {voxel} m, {device}): {steps} steps in {elapsed:.1f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
        f"held-out {result['test_points']} points: accuracy {t['accuracy']:.3f}, mean IoU {t['mean_iou']:.3f} "
        f"({', '.join(f'{k} {v:.2f}' for k, v in t['iou'].items())})")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", default=os.path.join(_ROOT, "demo_output"))
    args = parser.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and tg.with_cuda else "cpu"))
    steps = args.steps or (300 if device.type == "cuda" else 100)
    train(device, steps, out_dir=args.out)


if __name__ == "__main__":
    main()
