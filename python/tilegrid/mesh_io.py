"""Reading point clouds and triangle meshes from PLY and OFF files, the formats scanned models
are usually shipped in.

    vertices, faces = tg.read_mesh("bunny00.off")   # faces is None for a point cloud

PLY: ASCII and binary (little/big endian), a `vertex` element (x, y, z plus any other
properties, which are skipped) and an optional `face` element whose first list property
holds the vertex indices. OFF: the ASCII form (an optional leading "OFF" line, counts, then
vertices and faces). Polygons with more than three corners are split into fans.
"""

from __future__ import annotations

from typing import Optional

import warnings

import numpy as np
import torch

_SCALARS = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}


def _error(path: str, what: str, reader: str = "read_ply") -> ValueError:
    return ValueError(f"{reader}: {path}: {what}")


def _parse_header(path: str, f):
    if f.readline().strip() != b"ply":
        raise _error(path, "not a PLY file (expected 'ply' on the first line)")
    fmt, elements = None, []
    while True:
        line = f.readline()
        if not line:
            raise _error(path, "the header has no 'end_header'")
        words = line.decode("ascii", "replace").split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "end_header":
            break
        if words[0] == "format":
            fmt = words[1]
        elif words[0] == "element":
            elements.append((words[1], int(words[2]), []))
        elif words[0] == "property" and elements:
            if words[1] == "list":
                elements[-1][2].append((words[4], ("list", _SCALARS[words[2]], _SCALARS[words[3]])))
            else:
                elements[-1][2].append((words[2], _SCALARS[words[1]]))
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise _error(path, f"expected format ascii or binary_little/big_endian, got {fmt!r}")
    return fmt, elements


def _read_binary_element(path: str, f, count: int, props, endian: str, strict: bool):
    if all(not isinstance(t, tuple) for _, t in props):  # fixed-size rows: one read
        dtype = np.dtype([(name, endian + t) for name, t in props])
        data = f.read(dtype.itemsize * count)
        whole = len(data) // dtype.itemsize
        if whole < count:
            if strict:
                raise _error(path, f"truncated: the header declares {count} rows, the file holds {whole}")
            warnings.warn(f"read_ply: {path} is truncated; read {whole} of {count} rows", stacklevel=3)
        return np.frombuffer(data, dtype=dtype, count=whole), None
    # Rows with a list: read row by row (faces of a mesh; fine for the sizes PLY files hold).
    lists = []
    for _ in range(count):
        row = None
        for _, t in props:
            if isinstance(t, tuple):
                n = int(np.frombuffer(f.read(np.dtype(t[1]).itemsize), endian + t[1])[0])
                values = np.frombuffer(f.read(np.dtype(t[2]).itemsize * n), endian + t[2])
                row = values if row is None else row
            else:
                f.read(np.dtype(t).itemsize)
        lists.append(row)
    return None, lists


def _read_ascii_element(f, count: int, props):
    rows, lists = [], []
    for _ in range(count):
        values = f.readline().split()
        if any(isinstance(t, tuple) for _, t in props):
            n = int(values[0])
            lists.append(np.array(values[1 : 1 + n], dtype=np.int64))
        else:
            rows.append([float(v) for v in values[: len(props)]])
    if lists:
        return None, lists
    dtype = np.dtype([(name, "f8") for name, _ in props])
    return np.array([tuple(r) for r in rows], dtype=dtype), None


def _triangles(lists) -> np.ndarray:
    tris = []
    for poly in lists:
        for c in range(1, len(poly) - 1):  # fan: (0, c, c + 1)
            tris.append((poly[0], poly[c], poly[c + 1]))
    return np.asarray(tris, dtype=np.int64).reshape(-1, 3)


def read_ply(path: str, strict: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The vertices and triangles of a PLY file (ASCII or binary, the module's text).

    Args:
        path: The .ply file.
        strict: True (default): a binary table shorter than its header declares raises a
            ValueError. False: the whole rows of a truncated binary vertex table are kept,
            with a warning; some shipped scans are cut short by a few bytes.

    Returns:
        (vertices float32 [V, 3], faces int64 [F, 3] or None): faces is None for a point
        cloud; polygons are split into triangle fans.
    """
    with open(path, "rb") as f:
        fmt, elements = _parse_header(path, f)
        endian = "<" if fmt == "binary_little_endian" else ">"
        vertices = faces = None
        for name, count, props in elements:
            if fmt == "ascii":
                table, lists = _read_ascii_element(f, count, props)
            else:
                table, lists = _read_binary_element(path, f, count, props, endian, strict)
            if name == "vertex":
                if table is None or not {"x", "y", "z"} <= set(table.dtype.names):
                    raise _error(path, "the vertex element needs x, y and z properties")
                vertices = np.stack([table[a].astype(np.float32) for a in "xyz"], axis=1)
            elif name == "face" and lists is not None:
                faces = _triangles(lists)
    if vertices is None:
        raise _error(path, "no vertex element")
    if faces is not None and faces.size and (faces.min() < 0 or faces.max() >= len(vertices)):
        raise _error(path, f"a face names a vertex outside [0, {len(vertices)})")
    return torch.from_numpy(vertices), (torch.from_numpy(faces) if faces is not None else None)


def read_off(path: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The vertices and triangles of an ASCII OFF file.

    Args:
        path: The .off file.

    Returns:
        (vertices float32 [V, 3], faces int64 [F, 3] or None): faces is None when the file
        declares none; polygons are split into triangle fans.
    """
    with open(path) as f:
        words = [w for line in f for w in line.split("#", 1)[0].split()]
    if words and words[0].endswith("OFF"):
        if words[0] != "OFF":
            raise _error(path, f"expected a plain 'OFF' file, got the {words[0]} variant", "read_off")
        words = words[1:]
    if len(words) < 3:
        raise _error(path, "expected the vertex, face and edge counts", "read_off")
    nv, nf = int(words[0]), int(words[1])
    values = words[3:]
    if len(values) < 3 * nv:
        raise _error(path, f"the header declares {nv} vertices, the file holds fewer", "read_off")
    vertices = np.array(values[: 3 * nv], dtype=np.float32).reshape(nv, 3)
    polygons, at = [], 3 * nv
    for _ in range(nf):
        if at >= len(values):
            raise _error(path, f"the header declares {nf} faces, the file holds fewer", "read_off")
        n = int(values[at])
        polygons.append(np.array(values[at + 1 : at + 1 + n], dtype=np.int64))
        at += 1 + n
    faces = _triangles(polygons) if nf else None
    if faces is not None and faces.size and (faces.min() < 0 or faces.max() >= nv):
        raise _error(path, f"a face names a vertex outside [0, {nv})", "read_off")
    return torch.from_numpy(vertices), (torch.from_numpy(faces) if faces is not None else None)


def read_mesh(path: str, strict: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """read_ply or read_off, by the file's extension.

    Args:
        path: A .ply or .off file (either case); any other extension raises a ValueError.
        strict: Passed to read_ply (a truncated binary table raises when True); unused for
            OFF files.

    Returns:
        (vertices float32 [V, 3], faces int64 [F, 3] or None).
    """
    lower = path.lower()
    if lower.endswith(".ply"):
        return read_ply(path, strict)
    if lower.endswith(".off"):
        return read_off(path)
    raise ValueError(f"read_mesh: expected a .ply or .off file, got {path!r}")
