"""tg.load on .nvdb files it did not write: NanoVDB 32.9 wrote them the way fVDB's save does
(tests/data/nvdb/make_files.cpp: a batch of two grids; index grids, grids of values with fVDB's
shape record, an fVDB tensor grid; ZIP and BLOSC). The voxels and values follow the formulas
below, which make_files.cpp uses too."""

import pathlib
import struct
import zlib

import pytest
import torch

import tilegrid as tg
from tilegrid import info

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "nvdb"
CODECS = set(info.build_info()["nvdb_codecs"])


def voxels_of(b):
    v = [(i + 3 * b, j - 2, k + 5) for i in range(6) for j in range(5) for k in range(4)]
    v += [(20 + i, 9, -3 - b) for i in range(11)]
    v += [(-4100, 7, 1), (-4101, 7, 2 + b)]
    if b == 0:
        v.append((1, -5000, 4096))
    return v


def voxel_value(p, c):
    return p[0] + 0.5 * p[1] + 0.25 * p[2] + 100.0 * c


def small_value(p, c):
    return (p[0] % 16) + 0.25 * (p[2] % 8) + c


VOXEL_SIZES = [(0.5, 0.5, 0.5), (0.25, 0.5, 2.0)]
ORIGINS = [(0.25, 0.25, 0.25), (-1.0, 2.0, 3.5)]

# stem -> (dtype, per-voxel shape, value of channel c at voxel p); None: no features.
FILES = {
    "index": None,
    "float": (torch.float32, (), lambda p: voxel_value(p, 0)),
    "vec3f": (torch.float32, (3,), lambda p: [voxel_value(p, c) for c in range(3)]),
    "vec4d": (torch.float64, (4,), lambda p: [voxel_value(p, c) for c in range(4)]),
    "int64": (torch.int64, (), lambda p: int(4 * voxel_value(p, 0))),
    "tensor_float16": (
        torch.float16,
        (2, 3),
        lambda p: [[small_value(p, 3 * r + c) for c in range(3)] for r in range(2)],
    ),
}


def uncompressed_copy(zip_path, out_path):
    """The ZIP file rewritten with codec NONE: each grid's chunk (a uint64 size, then zlib's
    stream) inflated in place, and the segment header's and records' codec and sizes set to
    match (layout: src/grid/io/nvdb_layout.h)."""
    data = zip_path.read_bytes()
    out = bytearray()
    at = 0
    while at < len(data):
        header = bytearray(data[at : at + 16])
        (count,) = struct.unpack_from("<H", header, 12)
        struct.pack_into("<H", header, 14, 0)
        out += header
        at += 16
        records, sizes = [], []
        for _ in range(count):
            record = bytearray(data[at : at + 176])
            (grid_size,) = struct.unpack_from("<Q", record, 0)
            (name_size,) = struct.unpack_from("<I", record, 136)
            struct.pack_into("<Q", record, 8, grid_size)  # bytes on disk
            struct.pack_into("<H", record, 168, 0)
            records.append(record + data[at + 176 : at + 176 + name_size])
            sizes.append(grid_size)
            at += 176 + name_size
        for record in records:
            out += record
        for grid_size in sizes:
            (chunk,) = struct.unpack_from("<Q", data, at)
            grid = zlib.decompress(data[at + 8 : at + 8 + chunk])
            assert len(grid) == grid_size
            out += grid
            at += 8 + chunk
    out_path.write_bytes(bytes(out))
    return out_path


def path_of(stem, codec, tmp_path):
    if codec == "none":
        return uncompressed_copy(DATA / f"{stem}_zip.nvdb", tmp_path / f"{stem}.nvdb")
    if codec not in CODECS:
        pytest.skip(f"this build of tilegrid reads no {codec.upper()} files (build_info: {sorted(CODECS)})")
    return DATA / f"{stem}_{codec}.nvdb"


@pytest.mark.parametrize("codec", ["none", "zip", "blosc"])
@pytest.mark.parametrize("stem", sorted(FILES))
def test_files_nanovdb_wrote_as_fvdb_saves_them_load(stem, codec, tmp_path):
    grid, features, names = tg.load(path_of(stem, codec, tmp_path))
    assert names == ["first", "second"]
    assert grid.num_grids == 2
    assert torch.equal(grid.voxel_sizes, torch.tensor(VOXEL_SIZES, dtype=torch.float64))
    assert torch.equal(grid.origins, torch.tensor(ORIGINS, dtype=torch.float64))
    spec = FILES[stem]
    assert len(features) == (0 if spec is None else 1)
    for b in range(2):
        ijk = grid.ijk.jdata[grid.voxel_offsets[b] : grid.voxel_offsets[b + 1]]
        got = sorted(map(tuple, ijk.tolist()))
        assert got == sorted(voxels_of(b))
        if spec is None:
            continue
        dtype, row, value = spec
        rows = features[0].jdata[grid.voxel_offsets[b] : grid.voxel_offsets[b + 1]]
        assert rows.dtype == dtype and tuple(rows.shape[1:]) == row
        want = torch.tensor([value(p) for p in map(tuple, ijk.tolist())], dtype=torch.float64)
        assert torch.equal(rows.double(), want)


def test_a_compressed_file_with_a_damaged_chunk_is_refused(tmp_path):
    if "zip" not in CODECS:
        pytest.skip("this build of tilegrid reads no ZIP files")
    data = bytearray((DATA / "float_zip.nvdb").read_bytes())
    first_chunk = 16 + 2 * 176 + len(b"first\0") + len(b"second\0") + 8
    data[first_chunk + 40] ^= 0xFF
    bad = tmp_path / "bad.nvdb"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"grid \"first\": decompressing its ZIP chunk at byte 0 failed"):
        tg.load(bad)
