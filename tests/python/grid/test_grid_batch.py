import pytest
import torch

import tilegrid as tg


def order_key(ijk: torch.Tensor) -> torch.Tensor:
    """The documented row order as one sortable int64 per coordinate (for |coords| < 2^20):
    upper-node origin, then the 32^3, 16^3 and 8^3 positions."""
    i, j, k = (ijk[:, d].long() for d in range(3))
    root = ((i >> 12) + 256) * 512 * 512 + ((j >> 12) + 256) * 512 + ((k >> 12) + 256)
    pos = lambda s, n: (((i >> s) & (n - 1)) * n + ((j >> s) & (n - 1))) * n + ((k >> s) & (n - 1))  # noqa: E731
    return ((root * 32768 + pos(7, 32)) * 4096 + pos(3, 16)) * 512 + pos(0, 8)


def random_batch(sizes, low=-(1 << 20), high=1 << 20):
    parts = []
    for n in sizes:
        p = torch.randint(low, high, (n, 3), dtype=torch.int32)
        parts.append(torch.cat([p, p[: n // 3]]))  # with duplicates
    return tg.JaggedTensor(parts)


@pytest.mark.parametrize("sizes,high", [([2000, 0, 500], 1 << 20), ([3000], 50), ([40] * 64, 300)])
def test_active_voxels_are_unique_coordinates_in_documented_order(sizes, high):
    ijk = random_batch(sizes, -high, high)
    grid = tg.GridBatch.from_ijk(ijk)
    active = grid.ijk
    assert grid.num_grids == len(sizes)
    for b, (given, got) in enumerate(zip(ijk.unbind(), active.unbind())):
        unique = torch.unique(given, dim=0)
        expected = unique[torch.argsort(order_key(unique))]
        assert grid.num_voxels_at(b) == unique.shape[0]
        assert torch.equal(got, expected)


def test_ijk_to_index_matches_a_torch_lookup():
    ijk = random_batch([1500, 700], -200, 200)
    grid = tg.GridBatch.from_ijk(ijk)
    # Half the queries are coordinates of the grid (hits), half random (almost all misses).
    queries = tg.JaggedTensor(
        [torch.cat([ijk[b][:1000], torch.randint(-210, 210, (1000, 3), dtype=torch.int32)]) for b in range(2)]
    )
    got = grid.ijk_to_index(queries, cumulative=True)
    local = grid.ijk_to_index(queries)  # fVDB's default: rows within each grid
    active = grid.ijk
    for b in range(2):
        rows = {tuple(c): r + int(grid.voxel_offsets[b]) for r, c in enumerate(active[b].tolist())}
        expected = torch.tensor([rows.get(tuple(c), -1) for c in queries[b].tolist()])
        assert torch.equal(got[b], expected)
        first = int(grid.voxel_offsets[b])
        assert torch.equal(local[b], torch.where(expected >= 0, expected - first, expected))
    assert (got.jdata >= 0).any() and (got.jdata == -1).any()  # both cases were exercised


def test_voxel_sizes_and_origins_per_grid():
    ijk = tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)] * 2)
    grid = tg.GridBatch.from_ijk(ijk, voxel_sizes=[[0.1, 0.1, 0.2], [1, 1, 1]], origins=[0.5, 0, 0])
    assert torch.allclose(grid.voxel_sizes, torch.tensor([[0.1, 0.1, 0.2], [1.0, 1.0, 1.0]], dtype=torch.float64))
    assert torch.equal(grid.origins[1], torch.tensor([0.5, 0.0, 0.0], dtype=torch.float64))


def test_memory_per_voxel_of_a_dense_box_is_small():
    r = torch.arange(64, dtype=torch.int32)
    box = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([box]))
    assert grid.total_voxels == 64**3
    assert grid.bytes_per_voxel < 0.3


class TestBadInputs:
    def test_float_coordinates(self):
        with pytest.raises(TypeError, match="ijk must be int32, got float32"):
            tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(2, 3)]))

    def test_wrong_shape(self):
        with pytest.raises(ValueError, match=r"ijk must be \[N, 3\]"):
            tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(2, 4, dtype=torch.int32)]))

    def test_non_positive_voxel_size(self):
        with pytest.raises(ValueError, match="voxel_sizes must be > 0"):
            tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)]), voxel_sizes=[1, 0, 1])

    def test_mismatched_batch_sizes(self):
        grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)] * 2))
        with pytest.raises(ValueError, match="holds 1 tensors but the batch has 2 grids"):
            grid.ijk_to_index(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)]))


def test_moving_to_the_cpu_is_a_copy():
    grid = tg.GridBatch.from_dense(1, (3, 3, 3))
    copy = grid.to("cpu")
    assert copy.device == torch.device("cpu")
    assert torch.equal(copy.ijk.jdata, grid.ijk.jdata)
    with pytest.raises(ValueError, match="expected a cpu or cuda device"):
        grid.to("meta")
