"""fVDB's GridBatch selection, construction and bookkeeping (grid/indexing.py and GridBatch):
grid[i] and its other index forms, from_cat, from_zero_grids / from_zero_voxels,
from_dense_axis_aligned_bounds, ijk_to_inv_index, the transform matrices, leaf and byte counts,
and the Morton / Hilbert codes with an offset or transposed, each against a reference written
here, on the CPU and, where there is one, the GPU."""

import copy

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def random_batch(device, counts=(60, 0, 90), spread=40):
    ijk = [torch.unique(torch.randint(-spread, spread, (n, 3), dtype=torch.int32), dim=0) for n in counts]
    sizes = [[0.5, 0.25, 1.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]][:len(counts)]
    origins = torch.randn(len(counts), 3, dtype=torch.float64).tolist()
    return tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=sizes, origins=origins).to(device)


def assert_same_grid(got, want_ijk, want_size, want_origin):
    assert got.num_grids == 1
    assert torch.equal(got.ijk.jdata.cpu(), want_ijk.cpu())  # the same voxels in the same order
    assert torch.equal(got.voxel_sizes[0], want_size) and torch.equal(got.origins[0], want_origin)


@pytest.mark.parametrize("device", DEVICES)
def test_every_index_form_selects_the_grids_with_their_voxel_order(device):
    grid = random_batch(device)
    parts = grid.ijk.unbind()
    features = torch.randn(grid.total_voxels, 4, device=device)
    forms = {
        "int": (2, [2]), "negative int": (-3, [0]), "slice": (slice(1, None), [1, 2]),
        "step slice": (slice(None, None, 2), [0, 2]), "list": ([2, 0, 2], [2, 0, 2]),
        "bool list": ([True, False, True], [0, 2]), "tensor": (torch.tensor([1, 2]), [1, 2]),
        "bool tensor": (torch.tensor([False, True, True]), [1, 2]), "0-d tensor": (torch.tensor(2), [2]),
    }
    for name, (index, want) in forms.items():
        picked = grid[index]
        assert picked.num_grids == len(want), name
        assert picked.device == grid.device
        for k, b in enumerate(want):
            assert_same_grid(picked[k], parts[b], grid.voxel_sizes[b], grid.origins[b])
            # grid[b]'s features are the batch's rows of grid b.
            lo, hi = int(grid.joffsets[b]), int(grid.joffsets[b + 1])
            sub = features[lo:hi]
            assert torch.equal(picked[k].ijk.jdata.cpu(), grid.ijk.jdata[lo:hi].cpu()), name
            assert sub.shape[0] == picked[k].total_voxels
    assert grid.index_int(1).num_grids == 1 and grid.index_slice(slice(0, 2)).num_grids == 2
    assert grid.index_list([0]).num_grids == 1 and grid.index_tensor(torch.tensor([0, 1])).num_grids == 2
    assert len(grid) == 3 and [g.total_voxels for g in grid] == grid.num_voxels.tolist()
    assert grid[[]].num_grids == 0 and grid[5:].num_grids == 0


@pytest.mark.parametrize("index,error,message", [
    (3, IndexError, "grid 3 out of range for 3 grids"),
    (-4, IndexError, "grid -4 out of range"),
    ([True, False], IndexError, "one entry a grid"),
    ([0, True], IndexError, "ints or bools"),
    (torch.tensor([0.5]), IndexError, "integers or bools"),
    (torch.zeros(2, 2, dtype=torch.long), IndexError, "at most one dimension"),
    ("0", TypeError, "got str"),
])
def test_bad_indices_are_refused_by_name(index, error, message):
    with pytest.raises(error, match=message):
        random_batch("cpu")[index]


@pytest.mark.parametrize("device", DEVICES)
def test_from_cat_joins_selections_back_into_the_batch(device):
    grid = random_batch(device)
    joined = tg.GridBatch.from_cat([grid[0], grid[1:]])
    assert torch.equal(joined.ijk.jdata.cpu(), grid.ijk.jdata.cpu())
    assert torch.equal(joined.joffsets.cpu(), grid.joffsets.cpu())
    assert torch.equal(joined.voxel_sizes, grid.voxel_sizes) and torch.equal(joined.origins, grid.origins)
    with pytest.raises(ValueError, match="at least one GridBatch"):
        tg.GridBatch.from_cat([])
    with pytest.raises(TypeError, match="expected GridBatches, got Tensor"):
        tg.GridBatch.from_cat([grid, torch.zeros(3)])


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batches_and_grids(device):
    none = tg.GridBatch.from_zero_grids(device)
    assert none.num_grids == 0 and none.total_voxels == 0 and none.device.type == device
    empty = tg.GridBatch.from_zero_voxels(device, voxel_sizes=[[1, 1, 1], [2, 3, 4]], origins=0.5)
    assert empty.num_grids == 2 and empty.total_voxels == 0
    assert empty.voxel_sizes[1].tolist() == [2, 3, 4] and empty.origins[0].tolist() == [0.5] * 3
    assert tg.GridBatch.from_zero_voxels(device).num_grids == 1
    grid = random_batch(device)
    assert [grid.has_zero_voxels_at(b) for b in range(3)] == [False, True, False]
    assert grid.has_zero_voxels_at(-2)
    with pytest.raises(ValueError, match="describe 2 and 3 grids"):
        tg.GridBatch.from_zero_voxels(voxel_sizes=[[1, 1, 1]] * 2, origins=[[0, 0, 0]] * 3)


def test_address_and_sameness_follow_the_tree():
    grid = random_batch("cpu")
    assert grid.is_same(copy.copy(grid)) and grid.address == copy.deepcopy(grid).address
    other = tg.GridBatch.from_ijk(grid.ijk, voxel_sizes=grid.voxel_sizes.tolist(), origins=grid.origins.tolist())
    assert not grid.is_same(other) and grid.address != other.address
    assert grid.has_same_address_and_grid_count(copy.copy(grid)) and not grid.has_same_address_and_grid_count(3)
    assert grid.is_contiguous() and grid.contiguous() is grid


@pytest.mark.parametrize("device", DEVICES)
def test_dense_axis_aligned_bounds_put_the_end_voxels_on_the_bounds(device):
    low, high, dims = torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([1.0, 3.0, 2.5]), [4, 6, 5]
    for centre in (False, True):
        grid = tg.GridBatch.from_dense_axis_aligned_bounds(2, dims, low.tolist(), high.tolist(),
                                                           voxel_center=centre, device=device)
        assert grid.num_grids == 2 and grid.num_voxels.tolist() == [120, 120]
        centres = grid.voxel_to_world(grid.ijk).jdata.cpu().double()
        half = 0 if centre else 0.5 * grid.voxel_sizes[0]
        torch.testing.assert_close(centres.min(0).values - half, low.double())
        torch.testing.assert_close(centres.max(0).values + half, high.double())
    with pytest.raises(ValueError, match="bounds_max must exceed bounds_min"):
        tg.GridBatch.from_dense_axis_aligned_bounds(1, 2, 1, 0)
    with pytest.raises(ValueError, match="dense_dims must be at least 2"):
        tg.GridBatch.from_dense_axis_aligned_bounds(1, [1, 2, 2], voxel_center=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cumulative", [False, True])
def test_ijk_to_inv_index_names_the_last_query_of_each_voxel(device, cumulative):
    grid = random_batch(device)
    queries = [torch.randint(-45, 45, (n, 3), dtype=torch.int32) for n in (200, 5, 300)]
    queries[0] = torch.cat([queries[0], queries[0][:20]])  # duplicates: the later rows win
    got = grid.ijk_to_inv_index(tg.JaggedTensor(queries).to(device), cumulative=cumulative)
    assert torch.equal(got.joffsets.cpu(), grid.joffsets.cpu())
    rows = {(b, *c): r for r, (b, c) in enumerate(zip(grid.jidx.tolist(), grid.ijk.jdata.tolist()))}
    want = [-1] * grid.total_voxels
    start = 0
    for b, q in enumerate(queries):
        for n, c in enumerate(q.tolist()):
            r = rows.get((b, *c))
            if r is not None:
                want[r] = n + (start if cumulative else 0)
        start += q.shape[0]
    assert got.jdata.cpu().tolist() == want


@pytest.mark.parametrize("device", DEVICES)
def test_transform_matrices_map_voxels_to_world_and_back(device):
    grid = random_batch(device)
    ijk = grid.ijk
    homogeneous = torch.cat([ijk.jdata.double(), torch.ones(ijk.jdata.shape[0], 1, device=device)], 1)
    to_world = grid.voxel_to_world_matrices
    assert to_world.dtype == torch.float32 and to_world.shape == (3, 4, 4) and to_world.device == grid.device
    world = torch.einsum("nij,nj->ni", to_world.double()[ijk.jidx.long()], homogeneous)[:, :3]
    torch.testing.assert_close(world, grid.voxel_to_world(ijk).jdata.double(), rtol=1e-6, atol=1e-6)
    eye = torch.eye(4, dtype=torch.float64, device=device).expand(3, 4, 4)
    torch.testing.assert_close(grid.world_to_voxel_matrices.double() @ to_world.double(), eye,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_leaf_and_byte_counts(device):
    grid = random_batch(device, counts=(200, 0, 150), spread=300)
    want = [len({tuple(c) for c in (t.long() >> 3).tolist()}) for t in grid.ijk.to("cpu").unbind()]
    assert grid.num_leaf_nodes.tolist() == want and grid.num_leaf_nodes.device == grid.device
    assert grid.total_leaf_nodes == sum(want)
    assert grid.num_bytes.shape == (3,) and int(grid.num_bytes[1]) == 16  # an empty grid: its offsets
    assert int(grid.num_bytes.sum()) + 16 == grid.total_bytes == grid.tree_bytes


def interleave(coords, bits=21):
    """The reference Morton code of one (a, b, c): a's bit in the highest place of each triple."""
    code = 0
    for bit in range(bits):
        for axis, value in enumerate(coords):
            code |= ((value >> bit) & 1) << (3 * bit + 2 - axis)
    return code


@pytest.mark.parametrize("device", DEVICES)
def test_morton_codes_with_an_offset_and_transposed(device):
    grid = random_batch(device)
    offset = (50, 41, 60)
    ijk = grid.ijk.jdata.cpu().tolist()
    shifted = [[c[a] + offset[a] for a in range(3)] for c in ijk]
    assert grid.morton(offset=offset).jdata.cpu().tolist() == [interleave(c) for c in shifted]
    assert grid.morton_zyx(offset=offset).jdata.cpu().tolist() == [interleave(c[::-1]) for c in shifted]
    # Without an offset: relative to each grid's lowest corner, as morton() has always been.
    assert torch.equal(grid.morton().jdata, tg.grid.serialize.morton(grid).jdata)
    with pytest.raises(ValueError, match=r"ijk \+ offset must lie in \[0, 2097152\)"):
        grid.morton(offset=0)
    with pytest.raises(ValueError, match="an int or three ints"):
        grid.hilbert(offset=(0.5, 0, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_hilbert_codes_are_the_codes_of_the_reversed_coordinates(device):
    grid = random_batch(device, counts=(80,))
    flipped = tg.GridBatch.from_ijk(tg.JaggedTensor([grid.ijk.jdata.flip(1).cpu()])).to(device)
    rows = flipped.ijk_to_index(tg.JaggedTensor([grid.ijk.jdata.flip(1)])).jdata
    assert bool((rows >= 0).all())
    for offset in (None, (40, 40, 40)):
        flip_offset = None if offset is None else offset[::-1]
        want = flipped.hilbert(offset=flip_offset).jdata[rows]
        assert torch.equal(grid.hilbert_zyx(offset=offset).jdata, want)
