"""examples/generate_shapes.py end to end at a tiny size: two meshes written here (no download),
16 voxels across, two training steps; and its decoder's teacher forcing."""

import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
import generate_shapes  # noqa: E402

import tilegrid as tg  # noqa: E402

TETRAHEDRON = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 2 1\n3 0 1 3\n3 0 3 2\n3 1 2 3\n"
OCTAHEDRON = ("OFF\n6 8 0\n1 0 0\n-1 0 0\n0 1 0\n0 -1 0\n0 0 1\n0 0 -1\n"
              "3 0 2 4\n3 2 1 4\n3 1 3 4\n3 3 0 4\n3 2 0 5\n3 1 2 5\n3 3 1 5\n3 0 3 5\n")


@pytest.fixture(autouse=True)
def one_thread():
    """At 16 voxels across an op takes microseconds; on a machine whose cores are busy, an
    OpenMP barrier between two threads costs 50x that (1.3 s a training step instead of 20 ms)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def two_meshes(tmp_path, monkeypatch):
    folder = tmp_path / "models" / "cgal_meshes"
    folder.mkdir(parents=True)
    (folder / "tetrahedron.off").write_text(TETRAHEDRON)
    (folder / "octahedron.off").write_text(OCTAHEDRON)
    monkeypatch.setenv("TILEGRID_MODELS_DIR", str(tmp_path / "models"))


def test_two_steps_on_two_meshes_write_the_scores_and_the_pictures(tmp_path, monkeypatch):
    two_meshes(tmp_path, monkeypatch)
    out = tmp_path / "out"
    result = generate_shapes.run(torch.device("cpu"), resolution=16, steps=2, out_dir=str(out),
                                 batch=1, log=lambda *_: None)
    assert len(result["data"]["train"]) == 1 and len(result["data"]["held_out"]) == 1
    assert len(result["losses"]) == 2 and all(math.isfinite(x) for x in result["losses"])
    saved = json.loads((out / "generate_shapes.json").read_text())
    held = saved["held_out"]
    assert 0.0 <= held["iou"] <= 1.0 and 0.0 < held["iou_keeping_every_child"] <= 1.0
    shape = next(iter(held["shapes"].values()))
    assert shape["chamfer"] is None if shape["decoded_voxels"] == 0 else shape["chamfer"] >= 0
    assert saved["environment"]["git_revision"] and saved["arguments"]["resolution"] == 16
    for picture in ("generate_shapes.png", "generate_shapes_loss.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_teacher_forcing_decodes_the_true_grid_and_its_loss_falls(tmp_path, monkeypatch):
    """In training mode the decoder keeps the true children, so it grows the latent grid back
    into exactly the true fine grid, whatever its weights; a few steps on one shape lower the
    loss."""
    two_meshes(tmp_path, monkeypatch)
    folder = generate_shapes.find_meshes()
    path = os.path.join(folder, "octahedron.off")
    grid, why = generate_shapes.voxelize(path, 16, torch.device("cpu"))
    assert why is None and grid.total_voxels > 0
    levels = generate_shapes.pyramid(grid, 3)
    model = generate_shapes.ShapeAutoencoder()
    decoded, first = model(levels)
    assert torch.equal(generate_shapes.ijk_of(decoded).jdata, generate_shapes.ijk_of(grid).jdata)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(8):
        _, loss = model(levels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first.item()
    model.eval()
    with torch.no_grad():
        decoded, _ = model(levels)
    assert tg.voxel_iou(decoded, grid).shape == (1,)
