import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def random_grid(n=300, spread=20, grids=2):
    return tg.GridBatch.from_ijk(
        tg.JaggedTensor([torch.randint(-spread, spread, (n, 3), dtype=torch.int32) for _ in range(grids)]),
        voxel_sizes=[0.1, 0.2, 0.3], origins=[1.0, 2.0, 3.0],
    )


def test_coarsened_grid_holds_the_parents_and_keeps_block_centres():
    grid = random_grid()
    coarse = grid.coarsened_grid(2)
    for fine_ijk, coarse_ijk in zip(grid.ijk.unbind(), coarse.ijk.unbind()):
        parents = torch.unique(torch.div(fine_ijk, 2, rounding_mode="floor"), dim=0)
        assert torch.equal(torch.unique(coarse_ijk, dim=0), parents)
    torch.testing.assert_close(coarse.voxel_sizes[0], torch.tensor([0.2, 0.4, 0.6], dtype=torch.float64))
    # A coarse voxel's centre is the mean of the centres of the 8 fine voxels it covers.
    c = coarse.ijk[0][:1]
    block = c.long() * 2 + torch.tensor([[a, b, d] for a in (0, 1) for b in (0, 1) for d in (0, 1)])
    fine_centres = grid.voxel_to_world(tg.JaggedTensor([block.to(torch.int32), torch.zeros(0, 3, dtype=torch.int32)]))
    coarse_centre = coarse.voxel_to_world(tg.JaggedTensor([c, torch.zeros(0, 3, dtype=torch.int32)]))
    torch.testing.assert_close(fine_centres[0].mean(0), coarse_centre[0][0])


def test_refined_then_coarsened_gives_the_grid_back():
    grid = random_grid(100)
    fine = grid.refined_grid(3)
    assert fine.total_voxels == 27 * grid.total_voxels
    back = fine.coarsened_grid(3)
    assert torch.equal(back.ijk.jdata, grid.ijk.jdata)
    torch.testing.assert_close(back.origins, grid.origins)


def test_dual_dilated_and_pruned():
    box = tg.GridBatch.from_dense(1, (3, 4, 5))
    assert box.dual_grid().total_voxels == 4 * 5 * 6
    one = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[7, -3, 2]], dtype=torch.int32)]))
    assert one.dilated_grid(1).total_voxels == 27 and one.dilated_grid(0).total_voxels == 1
    mask = torch.rand(box.total_voxels) < 0.5
    kept = box.pruned_grid(mask)
    assert torch.equal(kept.ijk.jdata, box.ijk.jdata[mask])


OCTANT = [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]


def _ijk_sets(grid):
    return [set(map(tuple, t.cpu().tolist())) for t in grid.ijk.unbind()]


@pytest.mark.parametrize("device", DEVICES)
def test_dual_grid_exclude_border_on_a_block_and_an_isolated_voxel(device):
    # Grid 0: the 2x2x2 block at the origin and a lone voxel at (5, 5, 5); grid 1: a lone voxel.
    block = [list(o) for o in OCTANT]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([
        torch.tensor(block + [[5, 5, 5]], dtype=torch.int32, device=device),
        torch.tensor([[-2, 0, 3]], dtype=torch.int32, device=device),
    ]), voxel_sizes=[0.5, 1.0, 2.0], origins=[1.0, 2.0, 3.0])
    # All corners: the block's 3x3x3 and the lone voxels' 2x2x2 each.
    full = grid.dual_grid(exclude_border=False)
    assert full.ijk.jdata.device.type == device
    block_corners = {(i, j, k) for i in range(3) for j in range(3) for k in range(3)}
    lone_corners = {(5 + a, 5 + b, 5 + c) for a, b, c in OCTANT}
    other_corners = {(-2 + a, b, 3 + c) for a, b, c in OCTANT}
    assert _ijk_sets(full) == [block_corners | lone_corners, other_corners]
    assert _ijk_sets(full) == _ijk_sets(grid.dual_grid())
    # Border excluded: only (0, 0, 0), whose octant (0..1)^3 is all active; (5, 5, 5) and the
    # other grid's voxel lack theirs, and the other block voxels reach outside the block.
    inner = grid.dual_grid(exclude_border=True)
    assert _ijk_sets(inner) == [{(0, 0, 0)}, set()]
    assert inner.num_voxels.tolist() == [1, 0]
    for derived in (full, inner):
        torch.testing.assert_close(derived.voxel_sizes, grid.voxel_sizes)
        torch.testing.assert_close(derived.origins, grid.origins - grid.voxel_sizes / 2)


@pytest.mark.parametrize("device", DEVICES)
def test_dual_grid_exclude_border_matches_brute_force_on_random_grids(device):
    torch.manual_seed(0)
    # A dense spread (4^3 cells for 150 draws) so that many voxels have full octants.
    ijks = [torch.randint(-2, 2, (150, 3), dtype=torch.int32) for _ in range(2)]
    ijks.append(torch.randint(-3, 3, (20, 3), dtype=torch.int32))
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([t.to(device) for t in ijks]))
    want = [{p for p in s if all((p[0] + a, p[1] + b, p[2] + c) in s for a, b, c in OCTANT)}
            for s in _ijk_sets(grid)]
    assert any(want)
    assert _ijk_sets(grid.dual_grid(exclude_border=True)) == want
    # The full dual of any grid covers every octant of its voxels, so dropping its border gives
    # back at least the primal coordinates.
    back = grid.dual_grid().dual_grid(exclude_border=True)
    assert all(p <= b for p, b in zip(_ijk_sets(grid), _ijk_sets(back)))


def test_dual_grid_exclude_border_must_be_a_bool():
    grid = tg.GridBatch.from_dense(1, (2, 2, 2))
    with pytest.raises(TypeError, match="exclude_border must be a bool"):
        grid.dual_grid(exclude_border=1)


def test_feature_transfer_between_levels():
    grid = random_grid(400, 6)
    coarse = grid.coarsened_grid(2)
    features = torch.randn(grid.total_voxels, 4, requires_grad=True)
    pooled = grid.coarsen_features(coarse, features, 2, reduce="mean")
    parent = torch.div(grid.ijk.jdata, 2, rounding_mode="floor")
    rows = coarse.ijk_to_index(grid.ijk.jagged_like(parent), cumulative=True).jdata
    for r in range(0, coarse.total_voxels, 17):
        torch.testing.assert_close(pooled[r], features[rows == r].mean(0))
    pooled.sum().backward()
    assert features.grad is not None
    maxed = grid.coarsen_features(coarse, features.detach(), 2, reduce="amax")
    torch.testing.assert_close(maxed[rows[0]], features.detach()[rows == rows[0]].amax(0))
    refined = coarse.refine_features(grid, pooled.detach(), 2)
    torch.testing.assert_close(refined, pooled.detach()[rows])


def test_points_in_grid_and_bbox():
    grid = tg.GridBatch.from_dense(1, (2, 2, 2), ijk_min=(-1, 0, 3))
    pts = tg.JaggedTensor([torch.tensor([[-1.0, 0.0, 3.0], [0.4, 1.4, 4.4], [2.0, 0.0, 3.0]])])
    assert grid.points_in_grid(pts).jdata.tolist() == [True, True, False]
    assert grid.bboxes[0].tolist() == [[-1, 0, 3], [0, 1, 4]]


def test_bad_factors():
    grid = random_grid(10)
    with pytest.raises(ValueError, match=r"coarsened_grid: factor must be an int or three ints, each in \[1, "):
        grid.coarsened_grid(0)
    with pytest.raises(ValueError, match="mask must be bool"):
        grid.pruned_grid(torch.ones(3))


def test_dense_injection_round_trip():
    grid = random_grid(200, 5)
    features = torch.randn(grid.total_voxels, 2, requires_grad=True)
    dense = grid.inject_to_dense_cminor(features)
    assert dense.shape[0] == 2 and dense.shape[-1] == 2
    back = grid.inject_from_dense_cminor(dense, dense_origins=grid.total_bbox[0]).jdata
    torch.testing.assert_close(back, features)
    back.sum().backward()
    torch.testing.assert_close(features.grad, torch.ones_like(features))


def test_jcat_keeps_grids_and_row_order():
    a, b = random_grid(50, 10, 2), random_grid(60, 10, 1)
    both = tg.jcat([a, b])
    assert both.num_grids == 3
    assert torch.equal(both.ijk.jdata, torch.cat([a.ijk.jdata, b.ijk.jdata]))
    torch.testing.assert_close(both.voxel_sizes, torch.cat([a.voxel_sizes, b.voxel_sizes]))


def test_jcat_of_jagged_tensors_as_fvdb():
    """dim=None: the batches one after another; dim=k: tensor by tensor along dimension k."""
    x = tg.JaggedTensor([torch.randn(2, 3), torch.randn(4, 3)])
    y = tg.JaggedTensor([torch.randn(1, 3), torch.randn(5, 3)])
    batches = tg.jcat([x, y])
    assert batches.num_tensors == 4
    assert [t.shape[0] for t in batches.unbind()] == [2, 4, 1, 5]
    assert torch.equal(batches.jdata, torch.cat([x.jdata, y.jdata]))
    rows = tg.jcat([x, y], dim=0)
    assert rows.num_tensors == 2
    assert torch.equal(rows[1], torch.cat([x[1], y[1]]))
    wide = tg.jcat([x, x], dim=1)
    assert wide.jdata.shape == (6, 6) and torch.equal(wide[0][:, 3:], x[0])
    with pytest.raises(ValueError, match="equally many tensors"):
        tg.jcat([x, tg.JaggedTensor([torch.randn(1, 3)])], dim=0)
    with pytest.raises(TypeError, match="not mixed"):
        tg.jcat([x, random_grid(10, 5, 1)])
    with pytest.raises(ValueError, match="dim=None"):
        tg.jcat([random_grid(10, 5, 1)], dim=0)
