"""A radiance field on a sparse voxel grid, trained from rendered views of a mesh and scored on
views it never saw.

    python examples/radiance_field.py [--device cpu|cuda] [--resolution 64] [--image 64]
                                      [--views 40] [--held-out 8] [--steps 1000] [--out DIR]

Scene: the Stanford Bunny (scripts/fetch_models.sh; else a torus made here), scaled into
[0.1, 0.9]^3. Its pictures are made with tilegrid's ray marcher on a fine grid of the mesh's
voxels (256 across, GridBatch.from_mesh): a pixel's ray stops at the first voxel it meets
(voxels_along_rays, max_voxels=1) and takes the colour of a smooth procedural texture at that
point (a sine pattern in x, y and z: view-independent); rays that meet nothing are black.
Cameras sit on a sphere around the shape (golden-angle azimuths, elevations from -0.3 to 0.9
rad); every (views + held_out) / held_out-th camera is held out.

Model: a feature vector of 16 floats on each voxel of a coarse grid (the mesh's voxels at
--resolution across, dilated by one), read at any point by trilinear interpolation
(sample_trilinear) and decoded by a small MLP into a density (softplus) and a colour
(sigmoid). A ray is sampled only inside the grid's voxels (uniform_ray_samples, half a voxel a
step) and its samples are composited front to back (volume_render); the loss is the mean
squared error of the pixels. Twice during training, at a third and two thirds of the steps,
the grid is pruned to the voxels whose decoded density absorbs more than 1% of the light
crossing one voxel's width, dilated by one (pruned_grid, dilated_grid), the features carried over
by coordinates (inject_from) and their Adam state started afresh.

Scores on the held-out views: PSNR and SSIM (11 x 11 Gaussian window, sigma 1.5, on each
channel, averaged) against the pictures, beside the PSNR of an all-black image (the score of
a field that has learnt nothing). Writes radiance_field.json (arguments, environment,
loss curve, voxels before and after each pruning, per-view scores, times),
radiance_field.png (each held-out view: the picture left, the field's rendering right) and
radiance_field_loss.png to --out. Nothing beyond torch and numpy is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

import tilegrid as tg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_shapes import environment  # noqa: E402
from png import line_chart, write_png  # noqa: E402
from render_grid import camera_rays  # noqa: E402
from sample_models import find_bunny  # noqa: E402

FEATURES = 16
PICTURE_RESOLUTION = 256  # the fine grid the pictures are rendered from
PRUNE_OPACITY = 0.01


def scene_mesh() -> tuple[torch.Tensor, torch.Tensor, str]:
    """(vertices float32 [V, 3] in [0.1, 0.9]^3, faces int64 [F, 3], name): the bunny, else a
    torus of 64 x 32 quads split into triangles."""
    path = find_bunny()
    if path is not None:
        vertices, faces = tg.read_mesh(path)
        name = "bunny"
    else:
        u, v = torch.meshgrid(torch.arange(64) * (2 * math.pi / 64),
                              torch.arange(32) * (2 * math.pi / 32), indexing="ij")
        r = 1 + 0.4 * torch.cos(v)
        vertices = torch.stack([r * torch.cos(u), 0.4 * torch.sin(v), r * torch.sin(u)], -1).reshape(-1, 3)
        i, j = torch.meshgrid(torch.arange(64), torch.arange(32), indexing="ij")
        a, b = i * 32 + j, ((i + 1) % 64) * 32 + j
        c, d = ((i + 1) % 64) * 32 + (j + 1) % 32, i * 32 + (j + 1) % 32
        faces = torch.cat([torch.stack([a, b, c], -1), torch.stack([a, c, d], -1)]).reshape(-1, 3)
        name = "torus"
    v = vertices.double()
    lo, hi = v.min(0).values, v.max(0).values
    scale = 0.8 / float((hi - lo).max())
    v = 0.5 + (v - (lo + hi) / 2) * scale
    return v.float(), faces.long(), name


def voxel_grid(vertices: torch.Tensor, faces: torch.Tensor, resolution: int,
               device: torch.device) -> "tg.GridBatch":
    """The voxels the mesh's triangles cross, `resolution` across the unit cube."""
    return tg.GridBatch.from_mesh(tg.JaggedTensor([vertices.to(device)]),
                                  tg.JaggedTensor([faces.to(device)]), [1.0 / resolution] * 3,
                                  [0.5 / resolution] * 3)


def texture(points: torch.Tensor) -> torch.Tensor:
    """The scene's colour [N, 3] in [0.1, 0.9] at points [N, 3]: a smooth sine pattern."""
    p = points * (2 * math.pi * 3)
    phases = torch.stack([p[:, 0] + p[:, 1], p[:, 1] + p[:, 2] + 2.1, p[:, 2] + p[:, 0] + 4.2], -1)
    return 0.5 + 0.4 * torch.sin(phases)


def cameras(count: int, image: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(origins, directions) float32 [image^2, 3] of `count` cameras around the unit cube's
    centre: golden-angle azimuths, elevations evenly from -0.3 to 0.9 rad."""
    centre = torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)
    views = []
    for k in range(count):
        azimuth = k * math.pi * (3 - math.sqrt(5))
        elevation = -0.3 + 1.2 * k / max(count - 1, 1)
        o, d = camera_rays(centre, 0.5, image, image, azimuth=azimuth, elevation=elevation)
        views.append((o.float(), d.float()))
    return views


def picture(fine: "tg.GridBatch", origins: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """The scene seen along the rays, [R, 3]: the texture at the first voxel of `fine` each ray
    meets, black where it meets none."""
    _, times = fine.voxels_along_rays(tg.JaggedTensor([origins]), tg.JaggedTensor([directions]),
                                      max_voxels=1)
    counts = times.joffsets.diff()
    hit = counts > 0
    rgb = torch.zeros(origins.shape[0], 3, device=origins.device)
    t = times.jdata[:, 0]
    rgb[hit] = texture(origins[hit] + t[:, None] * directions[hit])
    return rgb


class Field(nn.Module):
    """Features on a grid's voxels and the MLP that decodes them into density and colour."""

    def __init__(self, grid: "tg.GridBatch", generator: torch.Generator):
        super().__init__()
        self.grid = grid
        self.features = nn.Parameter(0.1 * torch.randn(grid.total_voxels, FEATURES, generator=generator)
                                     .to(grid.device))
        self.decoder = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 4)).to(grid.device)

    def decode(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.decoder(features)
        return nn.functional.softplus(out[:, 0]), torch.sigmoid(out[:, 1:])

    def render(self, origins: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
        """The rays' colours [R, 3]: samples every half voxel inside the grid's voxels,
        composited front to back over black."""
        step = float(self.grid.voxel_sizes[0, 0]) / 2
        intervals = self.grid.uniform_ray_samples(tg.JaggedTensor([origins]),
                                                  tg.JaggedTensor([directions]), 0.0, 1e9, step)
        t0, t1 = intervals.jdata[:, 0], intervals.jdata[:, 1]
        ts, deltas = (t0 + t1) / 2, t1 - t0
        ray = torch.repeat_interleave(torch.arange(origins.shape[0], device=origins.device),
                                      intervals.joffsets.diff())
        points = origins[ray] + ts[:, None] * directions[ray]
        features = self.grid.sample_trilinear(tg.JaggedTensor([points]), self.features).jdata
        sigma, rgb = self.decode(features)
        colour, _, _, _, _ = tg.volume_render(sigma, rgb, deltas, ts, intervals.joffsets)
        return colour

    def prune(self) -> tuple[int, int]:
        """Keeps the voxels whose decoded density lets less than 1 - PRUNE_OPACITY of the light
        through a voxel's width, dilated by one; returns the voxel counts before and after."""
        before = self.grid.total_voxels
        with torch.no_grad():
            sigma, _ = self.decode(self.features)
            size = float(self.grid.voxel_sizes[0, 0])
            keep = 1 - torch.exp(-sigma * size) > PRUNE_OPACITY
            if not bool(keep.any()):
                return before, before
            kept = self.grid.pruned_grid(keep).dilated_grid(1)
            inside = kept.ijk_to_index(self.grid.ijk).jdata >= 0
            grid = self.grid.pruned_grid(inside)
            features = grid.inject_from(self.grid, self.features.detach())
        self.grid = grid
        self.features = nn.Parameter(features.jdata if isinstance(features, tg.JaggedTensor) else features)
        return before, grid.total_voxels


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else 10 * math.log10(1 / mse)


def ssim(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean SSIM of two [H, W, 3] images in [0, 1]: an 11 x 11 Gaussian window (sigma 1.5), the
    usual constants (0.01 and 0.03 of the range, squared), each channel, valid positions."""
    x = torch.arange(11, dtype=torch.float64) - 5
    g = torch.exp(-x * x / (2 * 1.5 ** 2))
    window = (g[:, None] * g[None, :] / g.sum() ** 2)[None, None]
    a, b = (t.double().permute(2, 0, 1)[:, None] for t in (a, b))  # [3, 1, H, W]
    blur = lambda t: nn.functional.conv2d(t, window)  # noqa: E731
    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a ** 2
    var_b = blur(b * b) - mu_b ** 2
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (var_a + var_b + c2))
    return float(s.mean())


def render_image(field: Field, origins: torch.Tensor, directions: torch.Tensor,
                 chunk: int = 8192) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([field.render(origins[i:i + chunk], directions[i:i + chunk])
                          for i in range(0, origins.shape[0], chunk)])


def side_by_side(path: str, pairs: list[tuple[np.ndarray, np.ndarray]], per_row: int = 4) -> None:
    """Each (picture, rendering) pair side by side with a 4-pixel grey gap, per_row pairs a row."""
    h, w, _ = pairs[0][0].shape
    cell_w, gap = 2 * w + 4, 8
    rows = math.ceil(len(pairs) / per_row)
    canvas = np.full((rows * (h + gap) + gap, min(len(pairs), per_row) * (cell_w + gap) + gap, 3), 128, np.uint8)
    for k, (truth, rendered) in enumerate(pairs):
        y, x = gap + (k // per_row) * (h + gap), gap + (k % per_row) * (cell_w + gap)
        canvas[y:y + h, x:x + w] = truth
        canvas[y:y + h, x + w + 4:x + 2 * w + 4] = rendered
    write_png(path, canvas)


def to_uint8(image: torch.Tensor) -> np.ndarray:
    return (image.clamp(0, 1) * 255 + 0.5).to(torch.uint8).cpu().numpy()


def run(device: torch.device, resolution: int = 64, image: int = 64, views: int = 40,
        held_out: int = 8, steps: int = 1000, rays_per_step: int = 2048,
        out_dir: Optional[str] = None, log: Callable[..., None] = print, seed: int = 0) -> dict:
    """Trains the field and scores it; writes the JSON and pictures to out_dir when given."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    vertices, faces, scene = scene_mesh()
    fine = voxel_grid(vertices, faces, PICTURE_RESOLUTION, device)
    every = (views + held_out) // held_out
    all_views = cameras(views + held_out, image)
    test_ids = [k for k in range(len(all_views)) if k % every == every - 1][:held_out]
    train_ids = [k for k in range(len(all_views)) if k not in test_ids]
    start = time.perf_counter()
    pictures = [picture(fine, o.to(device), d.to(device)) for o, d in all_views]
    picture_seconds = time.perf_counter() - start
    origins = torch.cat([all_views[k][0] for k in train_ids]).to(device)
    directions = torch.cat([all_views[k][1] for k in train_ids]).to(device)
    targets = torch.cat([pictures[k] for k in train_ids])
    log(f"{scene}: {fine.total_voxels} voxels in the picture grid; {len(train_ids)} training "
        f"views, {len(test_ids)} held out, {image}x{image} pixels ({picture_seconds:.2f} s)")

    field = Field(voxel_grid(vertices, faces, resolution, device).dilated_grid(1), generator)
    make_optimizer = lambda: torch.optim.Adam([  # noqa: E731
        {"params": [field.features], "lr": 5e-2}, {"params": field.decoder.parameters(), "lr": 5e-3}])
    optimizer = make_optimizer()
    losses, prunings = [], []
    prune_at = {steps // 3, (2 * steps) // 3} - {0}
    start = time.perf_counter()
    for step in range(steps):
        if step in prune_at:
            before, after = field.prune()
            prunings.append({"step": step, "voxels_before": before, "voxels_after": after})
            optimizer = make_optimizer()
            log(f"step {step}: pruned {before} -> {after} voxels")
        pick = torch.randint(0, origins.shape[0], (rays_per_step,), generator=generator).to(device)
        loss = ((field.render(origins[pick], directions[pick]) - targets[pick]) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step % max(steps // 10, 1) == 0 or step == steps - 1:
            log(f"step {step}: loss {losses[-1]:.5f}")
    train_seconds = time.perf_counter() - start

    scores, pairs = {}, []
    for k in test_ids:
        o, d = (t.to(device) for t in all_views[k])
        rendered = render_image(field, o, d).reshape(image, image, 3)
        truth = pictures[k].reshape(image, image, 3)
        scores[f"view {k}"] = {"psnr": psnr(rendered, truth), "ssim": ssim(rendered, truth),
                               "psnr_black": psnr(torch.zeros_like(truth), truth)}
        pairs.append((to_uint8(truth), to_uint8(rendered)))
    mean_psnr = sum(s["psnr"] for s in scores.values()) / len(scores)
    mean_ssim = sum(s["ssim"] for s in scores.values()) / len(scores)
    black = sum(s["psnr_black"] for s in scores.values()) / len(scores)
    log(f"held out: PSNR {mean_psnr:.2f} dB (a black image: {black:.2f}), SSIM {mean_ssim:.3f}; "
        f"training {train_seconds:.1f} s "
        f"({steps} steps of {rays_per_step} rays)")
    result = {
        "arguments": {"resolution": resolution, "image": image, "views": views, "held_out": held_out,
                      "steps": steps, "rays_per_step": rays_per_step, "seed": seed,
                      "device": str(device)},
        "environment": environment(device),
        "scene": {"mesh": scene, "picture_grid_voxels": fine.total_voxels,
                  "train_views": train_ids, "held_out_views": test_ids},
        "losses": losses,
        "prunings": prunings,
        "final_voxels": field.grid.total_voxels,
        "held_out": {"psnr": mean_psnr, "ssim": mean_ssim, "psnr_black": black, "views": scores},
        "seconds": {"pictures": picture_seconds, "training": train_seconds},
    }
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "radiance_field.json"), "w") as f:
            json.dump(result, f, indent=1)
        side_by_side(os.path.join(out_dir, "radiance_field.png"), pairs)
        line_chart(os.path.join(out_dir, "radiance_field_loss.png"), [losses])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() and tg.with_cuda else "cpu")
    parser.add_argument("--resolution", type=int, default=64, help="the field's voxels across the cube")
    parser.add_argument("--image", type=int, default=64, help="pixels across a view")
    parser.add_argument("--views", type=int, default=40, help="training views")
    parser.add_argument("--held-out", type=int, default=8, help="views scored, never trained on")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rays", type=int, default=2048, help="rays a training step")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                      "demo_output"))
    args = parser.parse_args()
    run(torch.device(args.device), args.resolution, args.image, args.views, args.held_out, args.steps,
        args.rays, args.out)


if __name__ == "__main__":
    main()
