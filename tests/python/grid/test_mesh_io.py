"""read_ply / read_off / read_mesh on small files written here, in each supported encoding."""

import numpy as np
import pytest
import torch

import tilegrid as tg

VERTICES = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0.5]], dtype=np.float32)
QUAD = [0, 1, 2, 3]  # one quad: read back as the fan (0, 1, 2), (0, 2, 3)
FAN = torch.tensor([[0, 1, 2], [0, 2, 3]])


def ply_header(fmt, faces=True, vertex_count=4):
    lines = ["ply", f"format {fmt} 1.0", "comment written by a test", f"element vertex {vertex_count}",
             "property float x", "property float y", "property float z", "property uchar red"]
    if faces:
        lines += ["element face 1", "property list uchar int vertex_indices"]
    return ("\n".join(lines + ["end_header"]) + "\n").encode()


def test_ascii_ply(tmp_path):
    body = "".join(f"{x} {y} {z} 7\n" for x, y, z in VERTICES) + "4 " + " ".join(map(str, QUAD)) + "\n"
    path = tmp_path / "a.ply"
    path.write_bytes(ply_header("ascii") + body.encode())
    v, f = tg.read_ply(str(path))
    assert torch.equal(v, torch.from_numpy(VERTICES)) and torch.equal(f, FAN)


@pytest.mark.parametrize("fmt,endian", [("binary_little_endian", "<"), ("binary_big_endian", ">")])
def test_binary_ply(tmp_path, fmt, endian):
    rows = np.zeros(4, dtype=[("x", endian + "f4"), ("y", endian + "f4"), ("z", endian + "f4"), ("r", "u1")])
    for a, name in enumerate("xyz"):
        rows[name] = VERTICES[:, a]
    face = np.array([4], dtype="u1").tobytes() + np.array(QUAD, dtype=endian + "i4").tobytes()
    path = tmp_path / "b.ply"
    path.write_bytes(ply_header(fmt) + rows.tobytes() + face)
    v, f = tg.read_mesh(str(path))
    assert torch.equal(v, torch.from_numpy(VERTICES)) and torch.equal(f, FAN)


def test_truncated_binary_ply_raises_unless_told_otherwise(tmp_path):
    rows = np.zeros(4, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("r", "u1")])
    path = tmp_path / "t.ply"
    path.write_bytes(ply_header("binary_little_endian", faces=False) + rows.tobytes()[:-5])
    with pytest.raises(ValueError, match="declares 4 rows, the file holds 3"):
        tg.read_ply(str(path))
    with pytest.warns(UserWarning, match="read 3 of 4 rows"):
        v, f = tg.read_ply(str(path), strict=False)
    assert v.shape == (3, 3) and f is None


def test_off(tmp_path):
    text = "OFF\n# a comment\n4 1 0\n" + "".join(f"{x} {y} {z}\n" for x, y, z in VERTICES) + "4 0 1 2 3\n"
    path = tmp_path / "m.off"
    path.write_text(text)
    v, f = tg.read_mesh(str(path))
    assert torch.equal(v, torch.from_numpy(VERTICES)) and torch.equal(f, FAN)


def test_bad_files_get_clear_errors(tmp_path):
    (tmp_path / "x.ply").write_bytes(b"not a ply\n")
    with pytest.raises(ValueError, match="not a PLY file"):
        tg.read_ply(str(tmp_path / "x.ply"))
    (tmp_path / "bad.off").write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 9\n")
    with pytest.raises(ValueError, match=r"a face names a vertex outside \[0, 3\)"):
        tg.read_off(str(tmp_path / "bad.off"))
    with pytest.raises(ValueError, match="expected a .ply or .off file"):
        tg.read_mesh("model.obj")
