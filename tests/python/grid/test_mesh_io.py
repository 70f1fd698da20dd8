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
    with pytest.raises(tg.MeshFormatError, match=r"declares 4 rows of 13 bytes \(52 bytes\), "
                       r"found 47 bytes left \(3 whole rows\): the file is truncated"):
        tg.read_ply(str(path))
    with pytest.warns(UserWarning, match="read 3 of 4 vertex rows"):
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
    with pytest.raises(ValueError, match=r"line 6: expected vertex indices in \[0, 3\), found 9"):
        tg.read_off(str(tmp_path / "bad.off"))
    with pytest.raises(ValueError, match="expected a .ply or .off file"):
        tg.read_mesh("model.obj")


def ascii_ply(vertex_lines, face_lines, vertex_count=None, face_count=None, index_type="int"):
    """An ASCII PLY of x, y, z vertices and a face list, with the counts given (or the lines')."""
    header = ["ply", "format ascii 1.0",
              f"element vertex {len(vertex_lines) if vertex_count is None else vertex_count}",
              "property float x", "property float y", "property float z",
              f"element face {len(face_lines) if face_count is None else face_count}",
              f"property list uchar {index_type} vertex_indices", "end_header"]
    return ("\n".join(header + vertex_lines + face_lines) + "\n").encode()


SQUARE = ["0 0 0", "1 0 0", "1 1 0", "0 1 0"]
OFF_SQUARE = "OFF\n4 1 0\n" + "\n".join(SQUARE) + "\n"

# (file name, bytes, the message's expected-vs-found part)
BAD_MESHES = [
    ("huge_count.ply", ascii_ply(["0 0 0"], [], vertex_count=1_000_000_000),
     r"element 'vertex': the header declares 1000000000 rows, expected one line each, found 1"),
    ("negative_count.ply", ascii_ply(SQUARE, [], vertex_count=-4),
     r"expected 'element <name> <count>' with a count >= 0, found 'element vertex -4'"),
    ("negative_face_count.ply", ascii_ply(SQUARE, ["3 0 1 2"], face_count=-1),
     r"found 'element face -1'"),
    ("polygon_of_0.ply", ascii_ply(SQUARE, ["0"]),
     r"element 'face': expected polygons of at least 3 corners, found one of 0"),
    ("negative_index.ply", ascii_ply(SQUARE, ["3 -1 0 1"]),
     r"element 'face': expected vertex indices in \[0, 4\), found -1"),
    ("ten_indices_declared_3.ply", ascii_ply(SQUARE, ["3 0 1 2 3 0 1 2 3 0 1"]),
     r"element 'face', line 14: expected 4 values, found 11"),
    ("float_indices.ply", ascii_ply(SQUARE, ["3 0 1.5 2"], index_type="float"),
     r"expected an integer type for the vertex indices 'vertex_indices', found float32"),
    ("not_integer_index.ply", ascii_ply(SQUARE, ["3 0 1.5 2", "3 0 1 2"]),
     r"element 'face', line 14: expected integers of type int32, found 1.5"),
    ("unknown_type.ply", ascii_ply(SQUARE, []).replace(b"float z", b"float128 z"),
     r"header line 6: expected 'property <type> <name>' with a PLY type"),
    ("no_end_header.ply", b"ply\nformat ascii 1.0\nelement vertex 1\n",
     r"expected 'end_header' before the end of the file, found none"),
    ("extra_lines.ply", ascii_ply(SQUARE, ["3 0 1 2", "3 0 2 3"], face_count=1),
     r"body: expected 5 lines after the header \(the header's elements\), found 6"),
    ("text_for_number.ply", ascii_ply(["0 0 zero"] + SQUARE[1:], []),
     r"element 'vertex': expected a number, found b'zero'"),
    ("no_vertex.ply", b"ply\nformat ascii 1.0\nelement point 0\nproperty float x\nend_header\n",
     r"header: expected a 'vertex' element, found \['point'\]"),
    ("huge_off.off", b"OFF\n1000000000 1 0\n0 0 0\n",
     r"line 2: the counts declare 1000000000 vertices and 1 faces, a line each, found 1 lines"),
    ("face_size_minus_1.off", (OFF_SQUARE + "-1 0 1 2\n").encode(),
     r"line 7: expected a face's corner count \(an integer >= 3\), found b'-1'"),
    ("negative_off_index.off", (OFF_SQUARE + "3 -1 0 1\n").encode(),
     r"line 7: expected vertex indices in \[0, 4\), found -1"),
    ("off_polygon_of_2.off", (OFF_SQUARE + "2 0 1\n").encode(),
     r"found b'2'"),
    ("off_ten_for_three.off", (OFF_SQUARE + "3 0 1 2 3 0 1 2 3 0 1\n").encode(),
     r"expected 3 vertex indices and an optional colour \(0, 1, 3 or 4 values\), found 10"),
    ("off_float_index.off", (OFF_SQUARE + "3 0 1.0 2\n").encode(),
     r"line 7: expected integer vertex indices, found b'1.0'"),
    ("off_negative_counts.off", b"OFF\n-3 1 0\n",
     r"line 2: expected the vertex, face and edge counts \(3 integers >= 0\), found b'-3 1 0'"),
    ("off_variant.off", b"NOFF\n0 0 0\n",
     r"expected a plain 'OFF' or 'COFF' file, found the b'NOFF' variant"),
    ("coff_vertex_without_colour.off", b"COFF\n2 0 0\n0 0 0 1 1 1\n0 0 1\n",
     r"line 4: expected a vertex's 3 coordinates and a colour of 3 or 4 values \(COFF\), found 3"),
    ("off_vertex_with_colour.off", b"OFF\n1 0 0\n0 0 0 1 1 1\n",
     r"line 3: expected a vertex's 3 coordinates \(plain OFF\), found 6 values"),
    ("off_extra_lines.off", (OFF_SQUARE + "3 0 1 2\n3 0 2 3\n").encode(),
     r"line 8: expected the end of the file after 4 vertices and 1 faces, found 1 more lines"),
    ("off_huge_index.off", (OFF_SQUARE + "3 0 1 99999999999999999999999\n").encode(),
     r"expected vertex indices in \[0, 4\), found b'99999999999999999999999'"),
]


@pytest.mark.parametrize("name,data,message", BAD_MESHES, ids=[c[0] for c in BAD_MESHES])
def test_malformed_files_raise_mesh_format_error_naming_file_and_mismatch(tmp_path, name, data,
                                                                         message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(tg.MeshFormatError, match=message) as error:
        tg.read_mesh(path)
    assert str(path) in str(error.value)
    assert isinstance(error.value, ValueError)


def binary_vertices(dtype, count=4):
    rows = np.zeros(count, dtype=[(a, dtype) for a in "xyz"])
    for a, name in enumerate("xyz"):
        rows[name] = VERTICES[:count, a]
    return rows.tobytes()


def binary_ply(body, vertex_type="float", count=4, face_lines=()):
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {count}",
              f"property {vertex_type} x", f"property {vertex_type} y", f"property {vertex_type} z",
              *face_lines, "end_header"]
    return ("\n".join(header) + "\n").encode() + body


def test_binary_file_size_must_match_the_header_exactly(tmp_path):
    path = tmp_path / "double_stored.ply"
    path.write_bytes(binary_ply(binary_vertices("<f8")))  # declared float, stored double
    with pytest.raises(tg.MeshFormatError,
                       match=r"body: expected 48 bytes after the header .*, found 96"):
        tg.read_ply(path)
    path.write_bytes(binary_ply(binary_vertices("<f4") + b"\0"))
    with pytest.raises(tg.MeshFormatError, match="expected 48 bytes after the header"):
        tg.read_ply(path)


def test_binary_lists_are_bounded_by_the_bytes_left(tmp_path):
    face = ["element face 1000000000", "property list uchar int vertex_indices"]
    path = tmp_path / "many_faces.ply"
    path.write_bytes(binary_ply(binary_vertices("<f4") + bytes([3]) + bytes(12), face_lines=face))
    with pytest.raises(tg.MeshFormatError, match=r"element 'face': the header declares "
                       r"1000000000 rows of at least 1 bytes, found 13 bytes left"):
        tg.read_ply(path)
    face = ["element face 1", "property list int int vertex_indices"]
    long_list = np.array([2**30], dtype="<i4").tobytes() + bytes(12)
    path.write_bytes(binary_ply(binary_vertices("<f4") + long_list, face_lines=face))
    with pytest.raises(tg.MeshFormatError, match=r"list 'vertex_indices' declares 1073741824 "
                       r"values of 4 bytes, expected at least 0 and at most the 12 bytes left"):
        tg.read_ply(path)
    negative = np.array([-1], dtype="<i4").tobytes()
    path.write_bytes(binary_ply(binary_vertices("<f4") + negative, face_lines=face))
    with pytest.raises(tg.MeshFormatError, match="declares -1 values"):
        tg.read_ply(path)


def test_mixed_polygons_become_fans_in_file_order(tmp_path):
    faces = ["3 0 1 2", "4 0 1 2 3", "3 1 2 3"]
    path = tmp_path / "mixed.ply"
    path.write_bytes(ascii_ply(SQUARE, faces))
    _, f = tg.read_ply(path)
    assert f.tolist() == [[0, 1, 2], [0, 1, 2], [0, 2, 3], [1, 2, 3]]
    face = ["element face 3", "property list uchar int vertex_indices"]
    body = b"".join(bytes([len(p)]) + np.array(p, dtype="<i4").tobytes()
                    for p in ([0, 1, 2], [0, 1, 2, 3], [1, 2, 3]))
    path.write_bytes(binary_ply(binary_vertices("<f4") + body, face_lines=face))
    _, f = tg.read_ply(path)
    assert f.tolist() == [[0, 1, 2], [0, 1, 2], [0, 2, 3], [1, 2, 3]]


def test_coff_vertex_colours_are_skipped(tmp_path):
    """CGAL's coloured meshes (COFF): r g b or r g b a after each vertex's coordinates."""
    colours = [" 255 0 0", " 0.5 0.5 0.5 1", " 0 0 255", " 1 1 1 255"]
    text = "COFF\n4 2 0\n" + "".join(f"{x} {y} {z}{c}\n" for (x, y, z), c in zip(VERTICES, colours))
    path = tmp_path / "coloured_vertices.off"
    path.write_text(text + "3 0 1 2\n3 0 2 3 10 20 30\n")
    v, f = tg.read_mesh(path)
    assert torch.equal(v, torch.from_numpy(VERTICES)) and f.tolist() == [[0, 1, 2], [0, 2, 3]]


def test_paths_may_be_str_or_pathlike_and_off_faces_may_carry_a_colour(tmp_path):
    path = tmp_path / "coloured.off"
    path.write_text("OFF 4 2 0\n" + "\n".join(SQUARE) + "\n3 0 1 2 255 0 0\n3 0 2 3 0.5\n")
    for given in (path, str(path)):
        v, f = tg.read_mesh(given)
        assert v.shape == (4, 3) and f.tolist() == [[0, 1, 2], [0, 2, 3]]
    with pytest.raises(tg.MeshFormatError, match="expected a .ply or .off file"):
        tg.read_mesh(tmp_path / "model.obj")
    for read, name in ((tg.read_mesh, "read_mesh"), (tg.read_ply, "read_ply"), (tg.read_off, "read_off")):
        with pytest.raises(TypeError, match=f"{name}: path must be a str, bytes or os.PathLike, got int"):
            read(3)
