"""Writes the fuzzers' seed files: small valid PLY, OFF and .nvdb files, the .nvdb ones by
tg.save. The committed corpus (tests/fuzz/corpus) holds the small ones; .nvdb files with
voxels take 270 KB an upper node, so `--large` writes those at fuzzing time instead.

    python tests/fuzz/make_seeds.py tests/fuzz/corpus            # the committed seeds
    python tests/fuzz/make_seeds.py --large /tmp/work/corpus     # plus .nvdb files with voxels
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import tilegrid as tg
import torch

TETRA = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.5]], dtype=np.float32)
POLYGONS = [[0, 1, 2], [0, 1, 3], [1, 2, 3, 0], [0, 2, 3]]


def ply_header(fmt: str, vertex_props: list[str], faces: list[str], extra: list[str]) -> bytes:
    lines = ["ply", f"format {fmt} 1.0", "comment seed for the reader fuzzers",
             f"element vertex {len(TETRA)}", *vertex_props, *faces, *extra, "end_header"]
    return ("\n".join(lines) + "\n").encode()


def ply_seeds() -> dict[str, bytes]:
    seeds = {}
    props = ["property float x", "property float y", "property float z", "property uchar red"]
    face = [f"element face {len(POLYGONS)}", "property list uchar int vertex_indices"]
    body = "".join(f"{x} {y} {z} 200\n" for x, y, z in TETRA)
    body += "".join(f"{len(p)} {' '.join(map(str, p))}\n" for p in POLYGONS)
    seeds["ascii_mixed_polygons.ply"] = ply_header("ascii", props, face, []) + body.encode()
    for fmt, e in (("binary_little_endian", "<"), ("binary_big_endian", ">")):
        rows = np.zeros(len(TETRA), dtype=[("x", e + "f4"), ("y", e + "f4"), ("z", e + "f4"),
                                           ("red", "u1")])
        for a, name in enumerate("xyz"):
            rows[name] = TETRA[:, a]
        faces = b"".join(bytes([len(p)]) + np.array(p, dtype=e + "i4").tobytes() for p in POLYGONS)
        edge = ["element edge 1", "property int vertex1", "property int vertex2"]
        seeds[f"{fmt}.ply"] = (ply_header(fmt, props, face, edge) + rows.tobytes() + faces
                               + np.array([0, 1], dtype=e + "i4").tobytes())
    triangles = ["element face 2", "property list uchar uint vertex_index"]
    doubles = ["property double x", "property double y", "property double z"]
    rows = TETRA.astype("<f8").tobytes()
    faces = b"".join(bytes([3]) + np.array(p, dtype="<u4").tobytes() for p in POLYGONS[:2])
    seeds["binary_double_triangles.ply"] = (ply_header("binary_little_endian", doubles, triangles,
                                                       []) + rows + faces)
    seeds["ascii_point_cloud.ply"] = ply_header("ascii", props[:3], [], []) + "".join(
        f"{x} {y} {z}\n" for x, y, z in TETRA).encode()
    return seeds


def off_seeds() -> dict[str, bytes]:
    vertices = "".join(f"{x} {y} {z}\n" for x, y, z in TETRA)
    faces = "".join(f"{len(p)} {' '.join(map(str, p))}\n" for p in POLYGONS)
    return {
        "mixed_polygons.off": f"OFF\n# a comment\n{len(TETRA)} {len(POLYGONS)} 0\n"
        f"{vertices}{faces}",
        "counts_on_first_line_with_colours.off": f"OFF {len(TETRA)} 2 0\n{vertices}"
        "3 0 1 2 255 0 0\n3 0 1 3 0.5 0.5 0.5 1\n",
        "points_only.off": f"{len(TETRA)} 0 0\n{vertices}",
    }


def nvdb_seeds(folder: pathlib.Path, large: bool) -> None:
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32)] * 2))
    tg.save(folder / "two_empty_grids.nvdb", empty, names=["a", "b"],
            features=[torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64)])
    if not large:
        return
    # One upper node (270 KB), one lower node and three leaves.
    ijk = torch.tensor([[0, 0, 0], [1, 0, 0], [8, 0, 0], [16, 3, 7], [20, 1, 1]], dtype=torch.int32)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]), voxel_sizes=[0.5, 0.5, 0.25],
                                 origins=[1.0, 2.0, 3.0])
    tg.save(folder / "five_voxels_two_channels.nvdb", grid, names="g",
            features=[torch.arange(5.0), torch.arange(10, dtype=torch.int64).view(5, 2)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--large", action="store_true", help="add .nvdb files with voxels")
    args = parser.parse_args()
    for reader, seeds in (("ply", ply_seeds()), ("off", off_seeds())):
        (args.folder / reader).mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (args.folder / reader / name).write_bytes(
                data if isinstance(data, bytes) else data.encode())
    (args.folder / "nvdb").mkdir(parents=True, exist_ok=True)
    nvdb_seeds(args.folder / "nvdb", args.large)


if __name__ == "__main__":
    main()
