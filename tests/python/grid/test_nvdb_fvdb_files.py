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


def test_save_writes_nanovdb_32_9_or_32_4_and_load_reads_both_back(tmp_path):
    """nanovdb_version="32.9": the magic numbers, version and OnIndex grids of NanoVDB 32.9
    (tests/data/nvdb/read_with_nanovdb.cpp checks such files with NanoVDB's own reader), and the
    same grids and features after load as with the 32.4 format."""
    g = torch.Generator().manual_seed(5)
    parts = [torch.randint(-300, 300, (n, 3), generator=g, dtype=torch.int32) for n in (200, 1, 57)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(parts), voxel_sizes=[0.5, 0.25, 2.0])
    n = grid.total_voxels
    features = [torch.randn(n, 3, generator=g), torch.randint(0, 256, (n,), generator=g).to(torch.uint8),
                torch.randn(n, 2, generator=g).double()]
    for version in ("32.4", "32.9"):
        path = tmp_path / f"{version}.nvdb"
        tg.save(path, grid, features, names=["a", "b", "c"], nanovdb_version=version)
        data = path.read_bytes()
        magic, packed = data[:8], struct.unpack_from("<I", data, 8)[0]
        assert magic == (b"NanoVDB2" if version == "32.9" else b"NanoVDB0")
        assert (packed >> 21, (packed >> 10) & 0x7FF) == ((32, 9) if version == "32.9" else (32, 4))
        grid_at = 16 + 3 * 176 + 2 + 2 + 2  # the records, then "a\0", "b\0", "c\0"
        assert data[grid_at : grid_at + 8] == (b"NanoVDB1" if version == "32.9" else b"NanoVDB0")
        assert struct.unpack_from("<I", data, grid_at + 636)[0] == (20 if version == "32.9" else 19)
        loaded, got, names = tg.load(path)
        assert names == ["a", "b", "c"]
        assert torch.equal(loaded.ijk.jdata, grid.ijk.jdata)
        assert torch.equal(loaded.voxel_sizes, grid.voxel_sizes)
        for want, have in zip(features, got):
            assert have.jdata.dtype == want.dtype and torch.equal(have.jdata, want)


def test_save_refuses_an_unknown_nanovdb_version(tmp_path):
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)]))
    with pytest.raises(ValueError, match='nanovdb_version must be "32.4" or "32.9", got \'32.6\''):
        tg.save(tmp_path / "x.nvdb", grid, nanovdb_version="32.6")
