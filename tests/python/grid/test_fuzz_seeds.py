"""The fuzzers' committed seeds (tests/fuzz/corpus, written by tests/fuzz/make_seeds.py) are
valid files: each loads, so the fuzzers start from inputs that reach past the first checks."""

import pathlib

import pytest

import tilegrid as tg

CORPUS = pathlib.Path(__file__).parents[2] / "fuzz" / "corpus"
SEEDS = sorted(p for p in CORPUS.glob("*/*") if p.is_file())


def test_every_reader_has_seeds():
    assert {p.parent.name for p in SEEDS} == {"ply", "off", "nvdb"}
    assert sum(p.stat().st_size for p in SEEDS) < 8192


@pytest.mark.parametrize("path", SEEDS, ids=[f"{p.parent.name}/{p.name}" for p in SEEDS])
def test_seed_loads(path):
    if path.suffix == ".nvdb":
        grid, features, names = tg.load(path)
        assert len(names) == grid.num_grids
    else:
        vertices, faces = tg.read_mesh(path)
        assert vertices.shape[1] == 3 and (faces is None or faces.shape[1] == 3)
