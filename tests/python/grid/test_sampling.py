import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg


def dense_grid_and_volume(dims, channels, dtype=torch.float64):
    """A dense grid, random features, and the same features as a [1, C, Di, Dj, Dk] volume."""
    grid = tg.GridBatch.from_dense(1, dims, voxel_sizes=[0.5, 0.25, 1.0], origins=[1.0, -2.0, 0.5])
    features = torch.randn(grid.total_voxels, channels, dtype=dtype)
    volume = torch.zeros(1, channels, *dims, dtype=dtype)
    ijk = grid.ijk.jdata.long()
    volume[0, :, ijk[:, 0], ijk[:, 1], ijk[:, 2]] = features.t()
    return grid, features, volume


def test_sampling_matches_grid_sample_on_a_dense_volume():
    dims = (6, 5, 7)
    grid, features, volume = dense_grid_and_volume(dims, 3)
    u = torch.rand(500, 3, dtype=torch.float64) * (torch.tensor(dims, dtype=torch.float64) - 1)
    points = grid.voxel_to_world(tg.JaggedTensor([u]))
    got = grid.sample_trilinear(points, features).jdata
    # grid_sample takes (x, y, z) = (k, j, i) normalised to [-1, 1] (align_corners: centres).
    norm = 2 * u / (torch.tensor(dims, dtype=torch.float64) - 1) - 1
    want = F.grid_sample(volume, norm.flip(-1).view(1, 1, 1, -1, 3), align_corners=True)
    torch.testing.assert_close(got, want.view(3, -1).t(), rtol=1e-10, atol=1e-10)


def test_missing_voxels_count_as_zero():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[0, 0, 0]], dtype=torch.int32)]))
    f = torch.ones(1, 1, dtype=torch.float64)
    pts = tg.JaggedTensor([torch.tensor([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]], dtype=torch.float64)])
    torch.testing.assert_close(grid.sample_trilinear(pts, f).jdata[:, 0], torch.tensor([0.125, 1.0, 0.0], dtype=torch.float64))


def test_gradients_against_finite_differences():
    grid = tg.GridBatch.from_nearest_voxels_to_points(
        tg.JaggedTensor([torch.rand(30, 3, dtype=torch.float64) * 4, torch.rand(20, 3, dtype=torch.float64)]),
        voxel_sizes=[[0.7, 0.7, 0.7], [0.3, 0.3, 0.3]],
    )
    pts = tg.JaggedTensor([torch.rand(12, 3, dtype=torch.float64) * 4, torch.rand(9, 3, dtype=torch.float64)])
    features = torch.randn(grid.total_voxels, 2, dtype=torch.float64, requires_grad=True)
    p = pts.jdata.clone().requires_grad_()

    def sample(features, p):
        return grid.sample_trilinear(tg.JaggedTensor.from_data_and_offsets(p, pts.joffsets), features).jdata

    assert torch.autograd.gradcheck(sample, (features, p))
    values = torch.randn(21, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: grid.splat_trilinear(pts, v).jdata, (values,))


def test_splat_is_the_adjoint_of_sample():
    grid = tg.GridBatch.from_dense(2, (5, 5, 5))
    pts = tg.JaggedTensor([torch.rand(40, 3, dtype=torch.float64) * 4 for _ in range(2)])
    f = torch.randn(grid.total_voxels, 3, dtype=torch.float64)
    v = torch.randn(80, 3, dtype=torch.float64)
    lhs = (grid.sample_trilinear(pts, f).jdata * v).sum()
    rhs = (f * grid.splat_trilinear(pts, v).jdata).sum()
    torch.testing.assert_close(lhs, rhs)


def test_from_points_and_nearest_voxels():
    p = torch.randn(200, 3) * 10
    points = tg.JaggedTensor([p])
    grid = tg.GridBatch.from_points(points, voxel_sizes=[0.5, 0.5, 0.5], origins=[0.1, 0.2, 0.3])
    ijk = torch.round((p.double() - torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)) / 0.5).int()
    assert torch.equal(torch.unique(grid.ijk.jdata, dim=0), torch.unique(ijk, dim=0))
    near = tg.GridBatch.from_nearest_voxels_to_points(points, voxel_sizes=[0.5, 0.5, 0.5])
    base = torch.floor(p.double() / 0.5).int()
    corners = torch.stack([base + torch.tensor([a, b, c], dtype=torch.int32) for a in (0, 1) for b in (0, 1) for c in (0, 1)])
    assert (near.ijk_to_index(tg.JaggedTensor([corners.reshape(-1, 3)])).jdata >= 0).all()


def test_world_voxel_round_trip():
    grid = tg.GridBatch.from_dense(2, (2, 2, 2), voxel_sizes=[[0.1, 0.2, 0.3], [1, 1, 1]], origins=[[1, 2, 3], [0, 0, 0]])
    u = tg.JaggedTensor([torch.randn(5, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)])
    torch.testing.assert_close(grid.world_to_voxel(grid.voxel_to_world(u)).jdata, u.jdata)


class TestBadInputs:
    def test_nan_points(self):
        with pytest.raises(ValueError, match="points must be finite"):
            tg.GridBatch.from_points(tg.JaggedTensor([torch.tensor([[0.0, float("nan"), 0.0]])]), voxel_sizes=[1, 1, 1])

    def test_voxel_size_not_positive(self):
        with pytest.raises(ValueError, match="voxel_sizes must be > 0"):
            tg.GridBatch.from_points(tg.JaggedTensor([torch.zeros(1, 3)]), voxel_sizes=[1, -1, 1])

    def test_features_with_wrong_row_count(self):
        grid = tg.GridBatch.from_dense(1, (2, 2, 2))
        with pytest.raises(ValueError, match="features must have 8 rows"):
            grid.sample_trilinear(tg.JaggedTensor([torch.zeros(1, 3)]), torch.zeros(7, 1))

    def test_mixed_dtypes(self):
        grid = tg.GridBatch.from_dense(1, (2, 2, 2))
        with pytest.raises(TypeError, match="features must be float32, got float64"):
            grid.sample_trilinear(tg.JaggedTensor([torch.zeros(1, 3)]), torch.zeros(8, 1, dtype=torch.float64))


def test_torch_compile_traces_sampling_and_splatting_forward_and_backward():
    """sample_trilinear / splat_trilinear are custom ops: a function of both traces whole
    (fullgraph) with its backward, gives eager's values and gradients, and takes a second grid
    of another size (the grid reaches the ops as a handle tensor, not a constant)."""
    def step(grid, pts, features, values):
        sampled = grid.sample_trilinear(pts, features).jdata
        splatted = grid.splat_trilinear(pts, values).jdata
        return (sampled * sampled).sum() + (splatted * features).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for n in (30, 55):
        grid = tg.GridBatch.from_nearest_voxels_to_points(
            tg.JaggedTensor([torch.rand(n, 3, dtype=torch.float64) * 3]), voxel_sizes=[0.5, 0.5, 0.5])
        pts = tg.JaggedTensor([torch.rand(17, 3, dtype=torch.float64) * 3])
        f = torch.randn(grid.total_voxels, 4, dtype=torch.float64)
        v = torch.randn(17, 4, dtype=torch.float64)
        want_f, want_v = f.clone().requires_grad_(), v.clone().requires_grad_()
        want = step(grid, pts, want_f, want_v)
        want.backward()
        got_f, got_v = f.clone().requires_grad_(), v.clone().requires_grad_()
        got = compiled(grid, pts, got_f, got_v)
        got.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_f.grad, want_f.grad)
        torch.testing.assert_close(got_v.grad, want_v.grad)


def test_a_copied_grid_samples_after_the_original_is_gone():
    import copy
    import gc
    grid = tg.GridBatch.from_dense(1, (3, 3, 3))
    pts = tg.JaggedTensor([torch.rand(5, 3, dtype=torch.float64) * 2])
    f = torch.randn(27, 2, dtype=torch.float64)
    want = grid.sample_trilinear(pts, f).jdata
    copies = [copy.copy(grid), copy.deepcopy(grid)]
    del grid
    gc.collect()
    for c in copies:
        torch.testing.assert_close(c.sample_trilinear(pts, f).jdata, want)


def test_a_sampling_op_on_a_grid_that_is_gone_says_so():
    grid = tg.GridBatch.from_dense(1, (2, 2, 2))
    handle = grid._handle
    del grid
    import gc
    gc.collect()
    with pytest.raises(ValueError, match="no longer exists"):
        tg.grid.sampling.sample_trilinear(handle, torch.zeros(1, 3, dtype=torch.float64),
                                          torch.tensor([0, 1]), torch.zeros(8, 1, dtype=torch.float64))
