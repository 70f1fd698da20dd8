import pytest
import torch

import tilegrid as tg


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
