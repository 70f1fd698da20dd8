"""Reading point clouds and triangle meshes from PLY and OFF files, the formats scanned models
are usually shipped in.

    vertices, faces = tg.read_mesh("bunny00.off")   # faces is None for a point cloud

PLY: ASCII and binary (little/big endian), a `vertex` element (x, y, z plus any other
properties, which are skipped) and an optional `face` element whose `vertex_indices` (or
`vertex_index`, or else first) list property holds integer vertex indices. OFF: the plain
ASCII form (an optional "OFF" line, the counts, a line per vertex, a line per face with an
optional colour) and COFF, whose vertex lines carry a colour (3 or 4 values, skipped).
Polygons with more than three corners are split into fans (0, c, c + 1).

Any file may arrive, so reading is bounded by the file: every count is checked against the
bytes or lines left before anything is allocated or looped over, a binary file's size must be
exactly what its header describes, and every face index must name a vertex. Every file that
cannot be read raises MeshFormatError (a ValueError) naming the reader, the file, the element
and what was expected and found; a file that cannot be opened raises OSError.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import NamedTuple, Union

import numpy as np
import torch

PathLike = Union[str, "os.PathLike[str]"]

_SCALARS = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_COUNT = re.compile(rb"[0-9]+\Z")
_INTEGER = re.compile(rb"-?[0-9]+\Z")
_HUGE = 10**30  # stands for any count of more than 30 digits (int() refuses > 4300)
_INDEX_NAMES = ("vertex_indices", "vertex_index")


class MeshFormatError(ValueError):
    """A PLY or OFF file that read_ply / read_off cannot read. The message names the reader,
    the file, the part of the file and what was expected and found."""


def _fail(reader: str, path: str, where: str, what: str) -> MeshFormatError:
    return MeshFormatError(f"{reader}: {path}: {where}: {what}")


class _List(NamedTuple):
    count: str  # numpy type codes
    item: str


class _Element(NamedTuple):
    name: str
    count: int
    props: list  # (name, type code or _List)


def _count(token: bytes) -> int | None:
    """A non-negative decimal integer, or None."""
    if not _COUNT.match(token):
        return None
    return int(token) if len(token) <= 30 else _HUGE


def _numbers(reader: str, path: str, where: str, tokens, dtype) -> np.ndarray:
    """`tokens` (bytes, any nesting numpy takes) as numbers of `dtype`, or a clear error."""
    array = np.array(tokens, dtype=np.bytes_)
    try:
        return array.astype(dtype)
    except (ValueError, OverflowError):
        for t in array.ravel():
            try:
                np.array([t]).astype(dtype)
            except (ValueError, OverflowError):
                found = bytes(t)[:30]
                raise _fail(reader, path, where, f"expected a number, found {found!r}") from None
        raise _fail(reader, path, where, "expected numbers, found text numpy cannot read") from None


# ---------------------------------------------------------------------------------------------
# PLY


def _parse_ply_header(path: str, data: bytes) -> tuple[str, list[_Element], int]:
    """(format, elements, offset of the body) of a PLY file's bytes."""

    def fail(line_no: int, what: str) -> MeshFormatError:
        return _fail("read_ply", path, f"header line {line_no}", what)

    fmt, elements, at, line_no = None, [], 0, 0
    while True:
        end = data.find(b"\n", at)
        if end < 0:
            raise fail(line_no + 1, "expected 'end_header' before the end of the file, found none")
        line, at, line_no = data[at:end], end + 1, line_no + 1
        words = line.split()
        if line_no == 1:
            if line.strip() != b"ply":
                raise fail(1, f"not a PLY file: expected 'ply', found {line[:40]!r}")
            continue
        if not words or words[0] in (b"comment", b"obj_info"):
            continue
        try:
            words = [w.decode("ascii") for w in words]
        except UnicodeDecodeError:
            raise fail(line_no, f"expected ASCII text, found {line[:60]!r}") from None
        key = words[0]
        if key == "end_header":
            break
        if key == "format":
            if fmt is not None or elements:
                raise fail(line_no, "expected one 'format' line before the elements, found another")
            if len(words) != 3 or words[1] not in ("ascii", "binary_little_endian",
                                                   "binary_big_endian") or words[2] != "1.0":
                raise fail(line_no, "expected 'format ascii|binary_little_endian|"
                           f"binary_big_endian 1.0', found {' '.join(words)!r}")
            fmt = words[1]
        elif key == "element":
            count = _count(words[2].encode()) if len(words) == 3 else None
            if count is None:
                raise fail(line_no, "expected 'element <name> <count>' with a count >= 0, found "
                           f"{' '.join(words)!r}")
            if any(e.name == words[1] for e in elements):
                raise fail(line_no, f"expected each element once, found a second {words[1]!r}")
            elements.append(_Element(words[1], count, []))
        elif key == "property":
            if not elements:
                raise fail(line_no, "expected an 'element' line before the first property")
            props = elements[-1].props
            if len(words) == 5 and words[1] == "list":
                count_t, item_t, name = _SCALARS.get(words[2]), _SCALARS.get(words[3]), words[4]
                if count_t is None or item_t is None or count_t[0] not in "iu":
                    raise fail(line_no, "expected 'property list <integer type> <type> <name>', "
                               f"found {' '.join(words)!r}")
                kind = _List(count_t, item_t)
            elif len(words) == 3 and words[1] in _SCALARS:
                name, kind = words[2], _SCALARS[words[1]]
            else:
                raise fail(line_no, "expected 'property <type> <name>' with a PLY type "
                           f"({', '.join(_SCALARS)}), found {' '.join(words)!r}")
            if any(p == name for p, _ in props):
                raise fail(line_no, f"expected each property of element {elements[-1].name!r} "
                           f"once, found a second {name!r}")
            props.append((name, kind))
        else:
            raise fail(line_no, "expected format, element, property, comment or end_header, "
                       f"found {' '.join(words)[:60]!r}")
    if fmt is None:
        raise fail(line_no, "expected a 'format' line in the header, found none")
    for el in elements:
        if el.count and not el.props:
            raise _fail("read_ply", path, f"element {el.name!r}", f"expected properties for its "
                        f"{el.count} rows, found none")
    return fmt, elements, at


def _check_integers(path: str, where: str, values: np.ndarray, code: str,
                    line_numbers=None) -> None:
    """ASCII values of an integer PLY type must be whole and in the type's range. values: one
    row per line, whose numbers `line_numbers` gives for the message."""
    if code[0] not in "iu" or values.size == 0:
        return
    info = np.iinfo(code)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values != np.floor(values)) | (values < info.min) | (
            values > info.max)
    if bad.any():
        first = np.argwhere(bad)[0]
        if line_numbers is not None:
            where = f"{where}, line {line_numbers[first[0]]}"
        raise _fail("read_ply", path, where, f"expected integers of type {np.dtype(code).name}, "
                    f"found {float(values[tuple(first)])!r}")


def _read_ascii_element(path: str, lines: list, at: int, el: _Element):
    """(table, lists, next line) of an ASCII element; `lines` are (line number, words) of the
    body's non-blank lines. table: float64 columns of the scalar properties; lists: per row,
    the values of the element's index list (or its first list), or None without lists."""
    where = f"element {el.name!r}"
    if el.count > len(lines) - at:
        raise _fail("read_ply", path, where, f"the header declares {el.count} rows, expected one "
                    f"line each, found {len(lines) - at} lines left in the file")
    rows = lines[at : at + el.count]
    list_at = _list_property(el)
    if list_at is None:
        for line_no, words in rows:
            if len(words) != len(el.props):
                raise _fail("read_ply", path, f"{where}, line {line_no}", f"expected "
                            f"{len(el.props)} values, found {len(words)}")
        values = _numbers("read_ply", path, where, [w for _, w in rows], np.float64)
        values = values.reshape(el.count, len(el.props))
        line_numbers = [n for n, _ in rows]
        for c, (_, code) in enumerate(el.props):
            _check_integers(path, where, values[:, c], code, line_numbers)
        table = {name: values[:, c] for c, (name, _) in enumerate(el.props)}
        return table, None, at + el.count
    fast = _ascii_rows_of_one_list(path, where, rows, el)
    if fast is not None:
        return {}, fast, at + el.count
    table, lists = {name: np.empty(el.count) for name, kind in el.props
                    if not isinstance(kind, _List)}, []
    for r, (line_no, words) in enumerate(rows):
        w, here = 0, f"{where}, line {line_no}"
        for p, (name, kind) in enumerate(el.props):
            if isinstance(kind, _List):
                n = _count(words[w]) if w < len(words) else None
                if n is None or n > np.iinfo(kind.count).max:
                    found = words[w][:30] if w < len(words) else "the end of the line"
                    raise _fail("read_ply", path, here, f"expected the length of list {name!r} "
                                f"(an integer >= 0 of type {np.dtype(kind.count).name}), found "
                                f"{found!r}")
                if len(words) - w - 1 < n:
                    raise _fail("read_ply", path, here, f"list {name!r} declares {n} values, "
                                f"found {len(words) - w - 1} on the line")
                items = _numbers("read_ply", path, here, words[w + 1 : w + 1 + n], np.float64)
                _check_integers(path, here, items, kind.item)
                if p == list_at:
                    lists.append(items.astype(np.int64) if kind.item[0] in "iu" else items)
                w += 1 + n
            else:
                if w >= len(words):
                    raise _fail("read_ply", path, here, f"expected property {name!r}, found the "
                                "end of the line")
                value = _numbers("read_ply", path, here, [words[w]], np.float64)
                _check_integers(path, here, value, kind)
                table[name][r] = value[0]
                w += 1
        if w != len(words):
            raise _fail("read_ply", path, here, f"expected {w} values, found {len(words)}")
    return table, lists, at + el.count


def _ascii_rows_of_one_list(path: str, where: str, rows: list, el: _Element):
    """The lists of an element whose only property is a list, in one conversion, when every
    row has the same length and says so (a triangle mesh's faces); None otherwise."""
    if len(el.props) != 1 or not rows:
        return None
    n = len(rows[0][1]) - 1
    if any(len(words) != n + 1 or words[0] != b"%d" % n for _, words in rows):
        return None
    kind = el.props[0][1]
    if n > np.iinfo(kind.count).max:
        return None
    items = _numbers("read_ply", path, where, [words[1:] for _, words in rows], np.float64)
    items = items.reshape(len(rows), n)
    _check_integers(path, where, items, kind.item, [line for line, _ in rows])
    return items.astype(np.int64) if kind.item[0] in "iu" else items


def _list_property(el: _Element) -> int | None:
    """Position of the element's vertex-index list (by name), else its first list, else None."""
    lists = [p for p, (_, kind) in enumerate(el.props) if isinstance(kind, _List)]
    named = [p for p in lists if el.props[p][0] in _INDEX_NAMES]
    return (named or lists or [None])[0]


def _read_binary_element(path: str, body: memoryview, at: int, el: _Element, endian: str,
                         truncated_ok: bool):
    """(table, lists, next offset, whole rows) of a binary element starting at byte `at`."""
    where = f"element {el.name!r}"
    left = len(body) - at
    if all(not isinstance(kind, _List) for _, kind in el.props):  # fixed-size rows: one read
        dtype = np.dtype([(name, endian + code) for name, code in el.props])
        need = el.count * dtype.itemsize
        rows = el.count
        if need > left:
            rows = left // max(dtype.itemsize, 1)
            if not truncated_ok:
                raise _fail("read_ply", path, where, f"the header declares {el.count} rows of "
                            f"{dtype.itemsize} bytes ({need} bytes), found {left} bytes left "
                            f"({rows} whole rows): the file is truncated")
        table = np.zeros(0, dtype)
        if rows:
            table = np.frombuffer(body, dtype=dtype, count=rows, offset=at)
        return table, None, at + rows * dtype.itemsize, rows
    list_at = _list_property(el)
    # Each row takes at least its scalars and list lengths, which bounds the row count.
    least = sum(np.dtype(k.count if isinstance(k, _List) else k).itemsize for _, k in el.props)
    if el.count * least > left:
        raise _fail("read_ply", path, where, f"the header declares {el.count} rows of at least "
                    f"{least} bytes, found {left} bytes left: the file is truncated")
    fast = _binary_rows_of_one_length(body, at, el, endian, list_at)
    if fast is not None:
        return fast
    table = {name: np.empty(el.count) for name, kind in el.props if not isinstance(kind, _List)}
    lists = []
    for r in range(el.count):
        for p, (name, kind) in enumerate(el.props):
            code = kind.count if isinstance(kind, _List) else kind
            size = np.dtype(code).itemsize
            if size > len(body) - at:
                raise _fail("read_ply", path, f"{where}, row {r}", f"expected {size} more bytes "
                            f"for property {name!r}, found {len(body) - at}: the file is truncated")
            value = np.frombuffer(body, endian + code, 1, at)[0]
            at += size
            if not isinstance(kind, _List):
                table[name][r] = value
                continue
            n, size = int(value), np.dtype(kind.item).itemsize
            if n < 0 or n * size > len(body) - at:
                raise _fail("read_ply", path, f"{where}, row {r}", f"list {name!r} declares {n} "
                            f"values of {size} bytes, expected at least 0 and at most the "
                            f"{len(body) - at} bytes left")
            if p == list_at:
                items = np.frombuffer(body, endian + kind.item, n, at)
                lists.append(items.astype(np.int64) if kind.item[0] in "iu" else items)
            at += n * size
    return table, lists, at, el.count


def _binary_rows_of_one_length(body, at, el, endian, list_at):
    """The rows of a binary element with lists in one read, when every list has the length of
    the first row's (a triangle mesh's faces); None otherwise."""
    if el.count == 0:
        return {name: np.empty(0) for name, k in el.props if not isinstance(k, _List)}, [], at, 0
    fields, pos = [], at
    for name, kind in el.props:
        if isinstance(kind, _List):
            if pos + np.dtype(kind.count).itemsize > len(body):
                return None
            n = int(np.frombuffer(body, endian + kind.count, 1, pos)[0])
            if n < 0:
                return None
            # A space cannot occur in a PLY name, so "<name> n" is no property's name.
            fields += [(f"{name} n", endian + kind.count), (name, endian + kind.item, (n,))]
            pos += np.dtype(kind.count).itemsize + n * np.dtype(kind.item).itemsize
            if pos > len(body):
                return None
        else:
            fields.append((name, endian + kind))
            pos += np.dtype(kind).itemsize
    dtype = np.dtype(fields)
    if el.count * dtype.itemsize > len(body) - at:
        return None
    rows = np.frombuffer(body, dtype=dtype, count=el.count, offset=at)
    for name, kind in el.props:
        if isinstance(kind, _List) and not (rows[f"{name} n"] == dtype[name].shape[0]).all():
            return None
    table = {name: rows[name] for name, k in el.props if not isinstance(k, _List)}
    lists = None
    if list_at is not None:
        name, kind = el.props[list_at]
        items = rows[name].reshape(el.count, -1)
        lists = items.astype(np.int64) if kind.item[0] in "iu" else items
    return table, lists, at + el.count * dtype.itemsize, el.count


def _triangles(reader: str, path: str, where: str, lists, vertex_count: int) -> np.ndarray:
    """Fans (0, c, c + 1) of the polygons in `lists` (a 2-D array when all have one length),
    in file order, each checked to have at least 3 corners and integer indices of a vertex."""
    if not isinstance(lists, np.ndarray):
        lengths = {len(poly) for poly in lists}
        if len(lengths) == 1:
            lists = np.stack(lists)
        elif lengths:
            return np.concatenate([_triangles(reader, path, where, poly[None], vertex_count)
                                   for poly in lists])
        else:
            lists = np.zeros((0, 3), dtype=np.int64)
    if lists.dtype.kind == "f":
        raise _fail(reader, path, where, "expected integer vertex indices, found a list of type "
                    f"{lists.dtype.name}")
    corners = lists.shape[1]
    if corners < 3 and lists.shape[0]:
        raise _fail(reader, path, where, f"expected polygons of at least 3 corners, found one of "
                    f"{corners}")
    polys = lists.astype(np.int64)
    bad = (polys < 0) | (polys >= vertex_count)
    if bad.any():
        raise _fail(reader, path, where, f"expected vertex indices in [0, {vertex_count}), found "
                    f"{int(polys[bad][0])}")
    fans = [np.stack([polys[:, 0], polys[:, c], polys[:, c + 1]], axis=1)
            for c in range(1, corners - 1)]
    if not fans:
        return np.zeros((0, 3), dtype=np.int64)
    # Row-major interleave, so each polygon's triangles stay together and in order.
    return np.stack(fans, axis=1).reshape(-1, 3)


def _path(op: str, path) -> str:
    """path (a str, bytes or os.PathLike) as a str; anything else a TypeError naming op."""
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError:
        raise TypeError(f"{op}: path must be a str, bytes or os.PathLike, got "
                        f"{type(path).__name__}") from None


def read_ply(path: PathLike, strict: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Read a PLY file (ASCII or binary, either byte order).

    Args:
        path: The file (a str or os.PathLike).
        strict: False keeps the whole rows of a binary file that ends inside its vertex table
            (with a warning, and without the elements after it) instead of raising; some
            shipped scans are cut short by a few bytes.

    Returns:
        (vertices float32 [V, 3], faces int64 [F, 3] or None); polygons are split into fans.

    Raises:
        MeshFormatError: a file it cannot read (the message names the file, the part of it and
            what was expected and found).
    """
    path = _path("read_ply", path)
    with open(path, "rb") as f:
        data = f.read()
    fmt, elements, at = _parse_ply_header(path, data)
    endian = "<" if fmt == "binary_little_endian" else ">"
    vertex = [e for e in elements if e.name == "vertex"]
    if not vertex:
        raise _fail("read_ply", path, "header", "expected a 'vertex' element, found "
                    f"{[e.name for e in elements]}")
    kinds = dict(vertex[0].props)
    missing = [a for a in "xyz" if isinstance(kinds.get(a), (_List, type(None)))]
    if missing:
        raise _fail("read_ply", path, "element 'vertex'", "expected scalar properties x, y and "
                    f"z, found {list(kinds)}")
    face = [e for e in elements if e.name == "face"]
    index_list = _list_property(face[0]) if face else None
    if face and index_list is None and face[0].count:
        raise _fail("read_ply", path, "element 'face'", "expected a list property of vertex "
                    f"indices, found {[name for name, _ in face[0].props]}")
    if index_list is not None:
        name, kind = face[0].props[index_list]
        if kind.item[0] not in "iu":
            raise _fail("read_ply", path, "element 'face'", f"expected an integer type for the "
                        f"vertex indices {name!r}, found {np.dtype(kind.item).name}")
    tables, lists = {}, {}
    if fmt == "ascii":
        first = data[:at].count(b"\n") + 1
        lines = [(first + n, line.split()) for n, line in enumerate(data[at:].split(b"\n"))]
        lines = [(n, words) for n, words in lines if words]
        line = 0
        for el in elements:
            tables[el.name], lists[el.name], line = _read_ascii_element(path, lines, line, el)
        if line != len(lines):
            raise _fail("read_ply", path, "body", f"expected {line} lines after the header "
                        f"(the header's elements), found {len(lines)}")
    else:
        body = memoryview(data)[at:]
        pos = 0
        for el in elements:
            truncated_ok = not strict and el.name == "vertex"
            tables[el.name], lists[el.name], pos, rows = _read_binary_element(
                path, body, pos, el, endian, truncated_ok)
            if rows < el.count:
                warnings.warn(f"read_ply: {path} is truncated; read {rows} of {el.count} vertex "
                              "rows, and none of the elements after them", stacklevel=2)
                break
        else:
            if pos != len(body):
                raise _fail("read_ply", path, "body", f"expected {pos} bytes after the header "
                            f"(the header's elements), found {len(body)}: the header does not "
                            "describe the file")
    table = tables["vertex"]
    vertices = np.stack([np.asarray(table[a], dtype=np.float32) for a in "xyz"], axis=1)
    faces = None
    face_lists = lists.get("face")
    if face_lists is not None:
        faces = _triangles("read_ply", path, "element 'face'", face_lists, len(vertices))
    return torch.from_numpy(vertices), (torch.from_numpy(faces) if faces is not None else None)


# ---------------------------------------------------------------------------------------------
# OFF


def read_off(path: PathLike) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Read an ASCII OFF file, plain or COFF (vertex colours skipped).

    Args:
        path: The file (a str or os.PathLike).

    Returns:
        (vertices float32 [V, 3], faces int64 [F, 3] or None); polygons are split into fans.

    Raises:
        MeshFormatError: a file it cannot read.
    """
    path = _path("read_off", path)
    with open(path, "rb") as f:
        data = f.read()

    def fail(where: str, what: str) -> MeshFormatError:
        return _fail("read_off", path, where, what)

    lines = [(n + 1, line.split(b"#", 1)[0].split()) for n, line in enumerate(data.split(b"\n"))]
    lines = [(n, words) for n, words in lines if words]
    at = 0
    values = (3,)  # how many values a vertex line holds
    if lines and lines[0][1][0].endswith(b"OFF"):
        if lines[0][1][0] not in (b"OFF", b"COFF"):
            raise fail("line 1", f"expected a plain 'OFF' or 'COFF' file, found the "
                       f"{lines[0][1][0][:20]!r} variant")
        if lines[0][1][0] == b"COFF":  # CGAL's coloured meshes: r g b [a] after x y z
            values = (6, 7)
        if len(lines[0][1]) > 1:  # "OFF nv nf ne" on one line
            lines[0] = (lines[0][0], lines[0][1][1:])
        else:
            at = 1
    if at >= len(lines):
        raise fail("header", "expected the vertex, face and edge counts, found the end of the file")
    line_no, words = lines[at]
    counts = [_count(w) for w in words]
    if len(counts) != 3 or None in counts:
        raise fail(f"line {line_no}", "expected the vertex, face and edge counts (3 integers "
                   f">= 0), found {b' '.join(words)[:60]!r}")
    nv, nf, _ = counts
    at += 1
    if nv + nf > len(lines) - at:
        raise fail(f"line {line_no}", f"the counts declare {nv} vertices and {nf} faces, a line "
                   f"each, found {len(lines) - at} lines left")
    rows = lines[at : at + nv]
    for n, words in rows:
        if len(words) not in values:
            want = "3 coordinates and a colour of 3 or 4 values (COFF)" if values != (3,) else \
                "3 coordinates (plain OFF)"
            raise fail(f"line {n}", f"expected a vertex's {want}, found {len(words)} values")
    vertices = _numbers("read_off", path, "vertices", [w[:3] for _, w in rows], np.float32)
    vertices = vertices.reshape(nv, 3)
    at += nv
    face_rows = lines[at : at + nf]
    polygons = _off_faces_of_one_length(face_rows, nv)
    if polygons is None:
        polygons = [_off_face(fail, n, words, nv) for n, words in face_rows]
    at += nf
    if at != len(lines):
        raise fail(f"line {lines[at][0]}", f"expected the end of the file after {nv} vertices "
                   f"and {nf} faces, found {len(lines) - at} more lines")
    faces = _triangles("read_off", path, "faces", polygons, nv) if nf else None
    return torch.from_numpy(vertices), (torch.from_numpy(faces) if faces is not None else None)


def _off_face(fail, line_no: int, words: list, vertex_count: int) -> np.ndarray:
    """The vertex indices of one OFF face line: "n i_1 ... i_n" and an optional colour."""
    size = _count(words[0])
    if size is None or size < 3:
        raise fail(f"line {line_no}", "expected a face's corner count (an integer >= 3), found "
                   f"{words[0][:30]!r}")
    colour = len(words) - 1 - size
    if colour not in (0, 1, 3, 4):
        raise fail(f"line {line_no}", f"expected {size} vertex indices and an optional colour "
                   f"(0, 1, 3 or 4 values), found {len(words) - 1} values")
    indices = words[1 : 1 + size]
    bad = [w for w in indices if not _INTEGER.match(w)]
    if bad:
        raise fail(f"line {line_no}", f"expected integer vertex indices, found {bad[0][:30]!r}")
    huge = [w for w in indices if len(w.lstrip(b"-")) > 18]  # past int64, and any vertex
    if huge:
        raise fail(f"line {line_no}", f"expected vertex indices in [0, {vertex_count}), found "
                   f"{huge[0][:30]!r}")
    polygon = np.array([int(w) for w in indices], dtype=np.int64)
    outside = polygon[(polygon < 0) | (polygon >= vertex_count)]
    if outside.size:
        raise fail(f"line {line_no}", f"expected vertex indices in [0, {vertex_count}), found "
                   f"{outside[0]}")
    return polygon


def _off_faces_of_one_length(rows: list, vertex_count: int) -> np.ndarray | None:
    """[F, n] indices of OFF faces in one conversion, when every line is "n i_1 ... i_n" with
    one n >= 3, no colour, and every index names a vertex; None otherwise (the caller's line by
    line pass then says what is wrong)."""
    if not rows:
        return None
    length = len(rows[0][1])
    if length < 4 or any(len(words) != length or words[0] != b"%d" % (length - 1)
                         for _, words in rows):
        return None
    try:
        polys = np.array([words[1:] for _, words in rows], dtype=np.bytes_).astype(np.int64)
    except (ValueError, OverflowError):
        return None
    if polys.min() < 0 or polys.max() >= vertex_count:
        return None
    return polys


def read_mesh(path: PathLike, strict: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """read_ply or read_off, by the file's extension.

    Args:
        path: A .ply or .off file (a str or os.PathLike).
        strict: Passed to read_ply (OFF files have no such option).

    Returns:
        (vertices float32 [V, 3], faces int64 [F, 3] or None).
    """
    text = _path("read_mesh", path)
    lower = text.lower()
    if lower.endswith(".ply"):
        return read_ply(text, strict)
    if lower.endswith(".off"):
        return read_off(text)
    raise MeshFormatError(f"read_mesh: expected a .ply or .off file, got {text!r}")
