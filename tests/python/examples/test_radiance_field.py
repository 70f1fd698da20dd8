"""examples/radiance_field.py: its pictures, scores and pruning, and a tiny training run on the
torus it makes itself (no download)."""

import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
import radiance_field  # noqa: E402

import tilegrid as tg  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """Small ops: one thread avoids OpenMP barriers on a busy machine (see test_generate_shapes)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_ray_into_one_voxel_takes_the_texture_where_it_enters():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[2, 2, 2]])]), voxel_sizes=[0.25] * 3,
                                 origins=[0.125] * 3)
    origins = torch.tensor([[0.625, 0.625, -1.0], [5.0, 5.0, 5.0]])
    directions = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    rgb = radiance_field.picture(grid, origins, directions)
    entry = torch.tensor([[0.625, 0.625, 0.5]])  # the voxel spans z from 0.5 to 0.75
    assert torch.allclose(rgb[0], radiance_field.texture(entry)[0], atol=1e-5)
    assert torch.equal(rgb[1], torch.zeros(3))  # the second ray meets nothing: black


def test_scores_of_equal_and_of_different_images():
    a = torch.rand(20, 20, 3, generator=torch.Generator().manual_seed(0))
    assert radiance_field.psnr(a, a) == math.inf
    assert radiance_field.ssim(a, a) == pytest.approx(1.0, abs=1e-12)
    b = (a + 0.1).clamp(0, 1)
    assert radiance_field.psnr(a, b) == pytest.approx(-10 * math.log10(float(((a - b) ** 2).mean())))
    assert radiance_field.ssim(a, torch.rand(20, 20, 3)) < 0.5


def test_pruning_keeps_the_features_of_the_voxels_it_keeps():
    ijk = torch.tensor([[i, 0, 0] for i in range(10)])
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]), voxel_sizes=[0.1] * 3, origins=[0.05] * 3)
    field = radiance_field.Field(grid, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for layer in field.decoder:  # density = softplus(features[:, 0] * 100 - 50)
            if isinstance(layer, torch.nn.Linear):
                layer.weight.zero_()
                layer.bias.zero_()
        field.decoder[0].weight[0, 0] = 1.0
        field.decoder[2].weight[0, 0] = 100.0
        field.decoder[2].bias[0] = -50.0
        field.features[:, 0] = 0.0
        field.features[4, 0] = 1.0  # only voxel 4 absorbs light
    old = {tuple(c.tolist()): f.clone() for c, f in zip(grid.ijk.jdata, field.features.detach())}
    before, after = field.prune()
    assert (before, after) == (10, 3)  # voxel 4 and its two neighbours
    kept = field.grid.ijk.jdata
    assert sorted(int(c[0]) for c in kept) == [3, 4, 5]
    for c, f in zip(kept, field.features.detach()):
        assert torch.equal(f, old[tuple(c.tolist())])


def test_a_short_run_on_the_torus_learns_and_writes_its_results(tmp_path, monkeypatch):
    monkeypatch.setattr(radiance_field, "find_bunny", lambda: None)
    out = tmp_path / "out"
    result = radiance_field.run(torch.device("cpu"), resolution=16, image=16, views=8, held_out=2,
                                steps=40, rays_per_step=512, out_dir=str(out), log=lambda *_: None)
    assert result["scene"]["mesh"] == "torus" and len(result["scene"]["held_out_views"]) == 2
    losses = result["losses"]
    assert len(losses) == 40 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) < sum(losses[:5])
    assert len(result["prunings"]) == 2
    held = result["held_out"]
    assert held["psnr"] > held["psnr_black"]  # better than drawing nothing
    assert 0.0 < held["ssim"] <= 1.0
    saved = json.loads((out / "radiance_field.json").read_text())
    assert saved["arguments"]["resolution"] == 16 and saved["environment"]["git_revision"]
    for picture in ("radiance_field.png", "radiance_field_loss.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
