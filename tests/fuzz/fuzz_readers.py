"""A libFuzzer (atheris) harness for one of tilegrid's file readers, through the Python API:

    python tests/fuzz/fuzz_readers.py ply|off|nvdb [libFuzzer flags and corpus folders]

scripts/fuzz.sh runs it for each reader with a time limit (targets ply, off, nvdb). Each input is
written to a file and read with tg.read_ply, tg.read_off or tg.load (the C++ .nvdb reader, which
fuzz_nvdb_reader.cpp also fuzzes in C++, coverage-guided and under sanitizers). An input passes
when the reader returns data that passes the checks below, or raises the documented error:
exactly MeshFormatError for PLY and OFF, exactly ValueError for .nvdb, with the file's path in
the message. Any other exception, a crash (SIGABRT, SIGSEGV), a hang (libFuzzer's -timeout) or an
allocation past -rss_limit_mb stops the run with a failure and the input saved.

What a returned result must satisfy:
- meshes: float32 [V, 3] vertices; None or int64 [F, 3] faces, each index in [0, V).
- .nvdb: one name per grid, features jagged like the grid's voxels, and saving the result
  and loading it again gives the same voxels, transforms, features and names.

Mutations: half are libFuzzer's own; the other half are made here from a seed file (the files
in the corpus folders given), because the C++ reader gives libFuzzer no coverage to steer by
and a .nvdb seed with voxels (300 KB) gains no Python coverage over an empty one: a few of a
seed's fields (for .nvdb, its non-zero 8-byte words: offsets, counts, masks, child tables,
names) get replaced by boundary values (0, -1, 2^31, 2^32, 2^63, ...), nudged, bit-flipped or
copied onto another (a child pointer onto its neighbour: shared nodes), or the file is cut
short; for text, numbers get replaced by such values and lines repeated or dropped. Most
mutations of a .nvdb header would only break its checksum, which the reader refuses first; so
three inputs in four get their checksum recomputed before they are read, to reach the checks
behind it. With TILEGRID_FUZZ_STATS=<file>, the outcome counts are written there
after every input (libFuzzer ends the process without running exit handlers).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import struct
import sys
import tempfile
import zlib

import atheris

with atheris.instrument_imports(include=["tilegrid"]):
    import tilegrid as tg

import torch

READERS = ("ply", "off", "nvdb")
if len(sys.argv) < 2 or sys.argv[1] not in READERS:
    sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(READERS)}}} [libFuzzer arguments]")
READER = sys.argv.pop(1)
FOLDER = pathlib.Path(tempfile.mkdtemp(prefix=f"tilegrid-fuzz-{READER}-"))
INPUT = FOLDER / f"input.{READER}"
STATS = os.environ.get("TILEGRID_FUZZ_STATS")
counts = {"inputs": 0, "clear_errors": 0, "loaded": 0}


SEEDS = [p.read_bytes() for a in sys.argv[1:] if not a.startswith("-") and os.path.isdir(a)
         for p in sorted(pathlib.Path(a).iterdir()) if p.is_file() and p.stat().st_size]
BOUNDARY = [0, 1, 2, 3, 7, 8, 31, 32, 255, 256, 4096, 2**15, 2**16 - 1, 2**20, 2**31 - 1, 2**31,
            2**32 - 1, 2**32, 2**61, 2**62, 2**62 + 1, 2**63 - 1, 2**63, 2**64 - 1]
# Non-zero 8-byte words of each binary seed: where its offsets, counts, masks and names lie.
FIELDS = [[at for at in range(0, len(seed) - 7, 8) if any(seed[at : at + 8])] for seed in SEEDS]
NUMBER = re.compile(rb"-?[0-9][0-9.e+-]*")


def boundary(rng: random.Random) -> int:
    value = rng.choice(BOUNDARY)
    return value if rng.random() < 0.7 else (-value) % 2**64


def mutate_binary(data: bytearray, fields: list[int], rng: random.Random) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        if not fields or len(data) < 16:
            break
        at = min(rng.choice(fields) + rng.choice((0, 0, 4)), len(data) - 8)
        size = rng.choice((4, 8))
        word = int.from_bytes(data[at : at + size], "little")
        choice = rng.random()
        if choice < 0.4:
            word = boundary(rng)
        elif choice < 0.6:
            word += rng.randint(-40, 40)
        elif choice < 0.8:
            word ^= 1 << rng.randrange(8 * size)
        else:  # another field's value: a child pointer onto its neighbour's, a count onto a size
            other = min(rng.choice(fields), len(data) - size)
            word = int.from_bytes(data[other : other + size], "little")
        data[at : at + size] = (word % 2 ** (8 * size)).to_bytes(size, "little")
    if rng.random() < 0.05:
        del data[rng.randrange(len(data) + 1) :]
    return data


def mutate_text(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 3)):
        n = rng.randrange(len(lines))
        choice = rng.random()
        numbers = list(NUMBER.finditer(lines[n]))
        if choice < 0.6 and numbers:
            m = rng.choice(numbers)
            value = str(rng.choice([boundary(rng), -1, -rng.randint(1, 9), rng.randint(0, 12)]))
            if rng.random() < 0.2:
                value += rng.choice((".5", ".0", "e3"))
            lines[n] = lines[n][: m.start()] + value.encode() + lines[n][m.end() :]
        elif choice < 0.8:
            lines.insert(n, lines[n])
        else:
            del lines[n]
            if not lines:
                lines = [b""]
    return b"\n".join(lines)


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if not SEEDS or rng.random() < 0.5:
        return atheris.Mutate(data, max_size)
    k = rng.randrange(len(SEEDS))
    if READER == "nvdb":
        out = bytes(mutate_binary(bytearray(SEEDS[k]), FIELDS[k], rng))
    else:
        out = mutate_text(SEEDS[k], rng)
    return out[:max_size]


class SilentlyWrong(AssertionError):
    """The reader returned data that breaks what it promises."""


class UnclearError(AssertionError):
    """The reader raised, but not the documented error naming the file."""


def with_checksums(data: bytes) -> bytes:
    """`data` with the header checksums of the first segment's grids recomputed (NanoVDB's
    partial CRC-32 of the grid, tree and root headers and the root table), where the bytes
    allow."""
    out = bytearray(data)
    try:
        count = struct.unpack_from("<H", data, 12)[0]
        grid, sizes = 16, []
        for _ in range(count):
            sizes.append(struct.unpack_from("<Q", data, grid)[0])
            grid += 176 + struct.unpack_from("<I", data, grid + 136)[0]
        for size in sizes:
            tree = grid + 672
            root = tree + struct.unpack_from("<Q", data, tree + 24)[0]
            end = root + 96 + 32 * struct.unpack_from("<I", data, root + 24)[0]
            if root < tree or end > len(data):
                break
            checksum = struct.unpack_from("<Q", data, grid + 8)[0]
            crc = zlib.crc32(data[grid + 16 : end])
            struct.pack_into("<Q", out, grid + 8, (checksum & ~0xFFFFFFFF) | crc)
            grid += size
    except (struct.error, OverflowError):
        pass
    return bytes(out)


def check_mesh(vertices: torch.Tensor, faces) -> None:
    if vertices.dtype != torch.float32 or vertices.dim() != 2 or vertices.shape[1] != 3:
        raise SilentlyWrong(f"vertices {vertices.dtype} {tuple(vertices.shape)}")
    if faces is None:
        return
    if faces.dtype != torch.int64 or faces.dim() != 2 or faces.shape[1] != 3:
        raise SilentlyWrong(f"faces {faces.dtype} {tuple(faces.shape)}")
    if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= vertices.shape[0]):
        raise SilentlyWrong(f"a face index outside [0, {vertices.shape[0]})")


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and (
        a.contiguous().numpy().tobytes() == b.contiguous().numpy().tobytes())


def check_nvdb(grid, features, names) -> None:
    if len(names) != grid.num_grids or not all(isinstance(n, str) for n in names):
        raise SilentlyWrong(f"{len(names)} names for {grid.num_grids} grids")
    for f in features:
        if not torch.equal(f.joffsets, grid.voxel_offsets):
            raise SilentlyWrong("a feature is not jagged like the grid's voxels")
    again = FOLDER / "again.nvdb"
    try:
        tg.save(again, grid, features=features, names=names)
    except ValueError:
        return  # something save refuses (a name over 255 bytes), not a reading error
    grid2, features2, names2 = tg.load(again)
    same = (names2 == names and len(features2) == len(features)
            and same_tensor(grid2.ijk.jdata, grid.ijk.jdata)
            and same_tensor(grid2.voxel_offsets, grid.voxel_offsets)
            and same_tensor(grid2.voxel_sizes, grid.voxel_sizes)
            and same_tensor(grid2.origins, grid.origins)
            and all(same_tensor(a.jdata, b.jdata) for a, b in zip(features, features2)))
    if not same:
        raise SilentlyWrong("saving what was loaded and loading it again changes it")


def test_one_input(data: bytes) -> None:
    if READER == "nvdb" and zlib.adler32(data) % 4:
        data = with_checksums(data)
    INPUT.write_bytes(data)
    counts["inputs"] += 1
    documented = tg.MeshFormatError if READER != "nvdb" else ValueError
    try:
        if READER == "ply":
            check_mesh(*tg.read_ply(INPUT))
        elif READER == "off":
            check_mesh(*tg.read_off(INPUT))
        else:
            check_nvdb(*tg.load(INPUT))
        counts["loaded"] += 1
    except AssertionError:
        raise
    except Exception as e:
        if type(e) is not documented or str(INPUT) not in str(e):
            raise UnclearError(f"{type(e).__name__}: {e}") from e
        counts["clear_errors"] += 1
    if STATS:
        pathlib.Path(STATS).write_text(json.dumps({"reader": READER, **counts}))


def main() -> None:
    atheris.Setup(sys.argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
