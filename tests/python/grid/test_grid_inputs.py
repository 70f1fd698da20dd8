"""GridBatch's edge cases and bad inputs: rounding that agrees with from_points, int64
coordinates, scalar voxel sizes, non-finite points, half-precision features, coordinates
leaving int32, mismatched row counts and devices."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_points_that_built_a_grid_test_inside_it(device, dtype):
    """Halfway points (k + 0.5 voxels) round away from zero in from_points; points_in_grid and
    points_to_index must round them the same way (torch.round would send half of them to the
    even neighbour, outside the grid)."""
    k = torch.arange(-50, 50, dtype=torch.float64)
    halves = torch.stack([k + 0.5, -k - 0.5, k * 0 + 2.5], 1)
    points = tg.JaggedTensor([torch.cat([halves, torch.randn(500, 3, dtype=torch.float64) * 20]).to(dtype).to(device)])
    grid = tg.GridBatch.from_points(points, voxel_sizes=1.0)
    assert bool(grid.points_in_grid(points).jdata.all())
    rows = grid.points_to_index(points).jdata
    assert torch.equal(grid.ijk.jdata[rows].cpu(), grid.points_to_ijk(points).jdata.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_int64_coordinates_and_scalar_voxel_sizes(device):
    ijk64 = torch.randint(-1000, 1000, (300, 3), dtype=torch.int64, device=device)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk64]), voxel_sizes=0.5, origins=1.0)
    ref = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk64.int()]), voxel_sizes=[0.5] * 3, origins=[1.0] * 3)
    assert torch.equal(grid.ijk.jdata.cpu(), ref.ijk.jdata.cpu())
    assert torch.equal(grid.voxel_sizes, ref.voxel_sizes) and torch.equal(grid.origins, ref.origins)
    far = torch.tensor([[2**40, 0, 0], [0, 0, 0]], dtype=torch.int64, device=device)
    rows = grid.ijk_to_index(tg.JaggedTensor([far])).jdata
    assert int(rows[0]) == -1
    with pytest.raises(ValueError, match="outside the int32 range"):
        tg.GridBatch.from_ijk(tg.JaggedTensor([far]))


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite_points_are_refused_by_sampling(device):
    grid = tg.GridBatch.from_dense(1, [4, 4, 4], device=device)
    feats = torch.randn(grid.total_voxels, 2, device=device)
    for bad in (float("nan"), float("inf")):
        pts = torch.rand(10, 3, device=device) * 3
        pts[7, 1] = bad
        with pytest.raises(ValueError, match="points must be finite.*at point 7"):
            grid.sample_trilinear(tg.JaggedTensor([pts]), feats)
        with pytest.raises(ValueError, match="points must be finite"):
            grid.splat_trilinear(tg.JaggedTensor([pts]), tg.JaggedTensor([torch.ones(10, 2, device=device)]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_features_are_sampled_in_float32(device, dtype):
    grid = tg.GridBatch.from_dense(1, [5, 5, 5], device=device)
    feats = torch.randn(grid.total_voxels, 3, device=device)
    pts = tg.JaggedTensor([torch.rand(50, 3, device=device) * 4])
    got = grid.sample_trilinear(pts, feats.to(dtype)).jdata
    want = grid.sample_trilinear(pts, feats.to(dtype).float()).jdata
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)
    splat = grid.splat_trilinear(pts, tg.JaggedTensor([torch.ones(50, 3, device=device, dtype=dtype)]))
    assert splat.jdata.dtype == dtype


def test_derived_grids_refuse_to_leave_int32():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[2**31 - 2, 0, 0]], dtype=torch.int32)]))
    with pytest.raises(ValueError, match="int32 range"):
        grid.refined_grid(4)
    with pytest.raises(ValueError, match="int32 range"):
        grid.dilated_grid(3)
    with pytest.raises(ValueError, match="int32 range"):
        grid.conv_grid(7, 1)


def test_feature_transfers_check_their_row_counts():
    grid = tg.GridBatch.from_dense(1, [4, 4, 4])
    coarse = grid.coarsened_grid(2)
    with pytest.raises(ValueError, match="one row per coarse voxel"):
        coarse.refine_features(grid, torch.randn(coarse.total_voxels + 1, 2), 2)
    with pytest.raises(ValueError, match="one row per fine voxel"):
        grid.coarsen_features(coarse, torch.randn(grid.total_voxels - 1, 2), 2)


def test_inject_refuses_features_on_another_device():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    grid = tg.GridBatch.from_dense(1, [3, 3, 3], device="cuda")
    with pytest.raises(ValueError, match="is on cpu but the grid is on cuda"):
        grid.inject_to_dense_cminor(torch.randn(grid.total_voxels, 2))
    dense = grid.inject_to_dense_cminor(torch.randn(grid.total_voxels, 2, device="cuda"))
    back = grid.inject_from_dense_cminor(dense).jdata
    assert back.device.type == "cuda" and back.shape == (grid.total_voxels, 2)


test_inject_refuses_features_on_another_device = pytest.mark.gpu(test_inject_refuses_features_on_another_device)


@pytest.mark.parametrize("device", DEVICES)
def test_far_points_read_and_write_no_voxel(device):
    """A point whose cell leaves int32 coordinates (1e30, 3e9, -1e30) is in no grid: it samples
    zeros and splats nothing. (Converted to int32 unchecked, its corner wrapped onto i = -2^31,
    where this grid has voxels.) A point inside the block at i = -2^31 still samples it."""
    low = -(2**31)
    block = torch.tensor([[low + a, b, c] for a in (0, 1) for b in (0, 1) for c in (0, 1)], dtype=torch.int32)
    ijk = torch.cat([block, torch.tensor([[0, 0, 0], [1, 0, 0]], dtype=torch.int32)]).to(device)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]))
    feats = torch.ones(grid.total_voxels, 2, device=device, dtype=torch.float64)
    pts = torch.tensor([[1e30, 0.5, 0.5], [3e9, 0.5, 0.5], [-1e30, 0.5, 0.5], [low + 0.5, 0.5, 0.5]],
                       dtype=torch.float64, device=device)
    got = grid.sample_trilinear(tg.JaggedTensor([pts]), feats).jdata
    assert torch.equal(got[:3].cpu(), torch.zeros(3, 2, dtype=torch.float64))
    assert bool((got[3] > 0.99).all())
    splat = grid.splat_trilinear(tg.JaggedTensor([pts[:3]]),
                                 tg.JaggedTensor([torch.ones(3, 2, device=device, dtype=torch.float64)]))
    assert float(splat.jdata.abs().sum()) == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_points_outside_int32_are_in_no_voxel(device):
    grid = tg.GridBatch.from_dense(1, [3, 3, 3], device=device)
    pts = torch.tensor([[1.0, 1.0, 1.0], [float("nan"), 1.0, 1.0], [float("inf"), 1, 1], [1e30, 1, 1],
                        [1, -3e9, 1]], dtype=torch.float64, device=device)
    inside = grid.points_in_grid(tg.JaggedTensor([pts])).jdata.cpu()
    assert inside.tolist() == [True, False, False, False, False]
    assert grid.points_to_index(tg.JaggedTensor([pts])).jdata.cpu().tolist() == [13, -1, -1, -1, -1]
    with pytest.raises(ValueError, match="point 1, .* lies in no voxel with int32 coordinates"):
        grid.points_to_ijk(tg.JaggedTensor([pts]))


def test_rounding_is_std_round_at_the_last_double_below_a_half():
    """0.49999999999999994 rounds to 0 (std::round, as from_points); floor(|u| + 0.5) gave 1."""
    pts = tg.JaggedTensor([torch.tensor([[0.49999999999999994, -0.49999999999999994, 2.5]], dtype=torch.float64)])
    grid = tg.GridBatch.from_points(pts, voxel_sizes=1.0)
    assert grid.ijk.jdata.tolist() == [[0, 0, 3]]
    assert grid.points_to_ijk(pts).jdata.tolist() == [[0, 0, 3]]
    assert bool(grid.points_in_grid(pts).jdata.all())


def test_num_voxels_is_fvdbs_per_grid_tensor():
    ijk = [torch.randint(-20, 20, (n, 3), dtype=torch.int32) for n in (50, 0, 7)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk))
    counts = grid.num_voxels
    assert counts.dtype == torch.int64 and counts.shape == (3,)
    assert counts.tolist() == [grid.num_voxels_at(b) for b in range(3)]
    assert counts.tolist() == [torch.unique(t, dim=0).shape[0] for t in ijk]


# ---- arguments of the wrong kind or past int32: a TypeError or ValueError naming them, never
# nanobind's signature dump, a truncated float or an allocation the size of the number -------


@pytest.mark.parametrize("call,error,message", [
    (lambda g: g.conv_grid(2**70, 1), ValueError, r"conv_grid: kernel_size must be an int or three ints, each in \[1, 2\*\*31 - 1\]"),
    (lambda g: g.conv_grid(3, [1, 1]), ValueError, r"conv_grid: stride must be an int or three ints"),
    (lambda g: g.conv_grid(3.0, 1), TypeError, r"conv_grid: kernel_size must be an int or three ints, got 3.0"),
    (lambda g: g.conv_grid(True, 1), TypeError, r"conv_grid: kernel_size must be an int or three ints, got True"),
    (lambda g: tg.ConvolutionPlan.from_grid_batch([3, 3, 2**40], 1, g, g), ValueError, r"ConvolutionPlan: kernel_size"),
    (lambda g: g.coarsened_grid(2**70), ValueError, r"coarsened_grid: factor must be an int or three ints, each in \[1, "),
    (lambda g: g.coarsened_grid(1.5), TypeError, r"coarsened_grid: factor must be an int or three ints, got 1.5"),
    (lambda g: g.refined_grid([2, 2]), ValueError, r"refined_grid: factor must be an int or three ints"),
    (lambda g: g.refined_grid(10**5), ValueError, r"refined_grid: 8 voxels x 10{15} offsets each would make more than 2\*\*31 - 1"),
    (lambda g: g.dilated_grid(10**5), ValueError, r"dilated_grid: 8 voxels x \d+ offsets each"),
    (lambda g: g.dilated_grid(1.5), TypeError, r"dilated_grid: n must be an int, got float"),
    (lambda g: g.dilated_grid(-1), ValueError, r"dilated_grid: n must be in \[0, 2\*\*31 - 1\], got -1"),
    (lambda g: g.max_pool(2**40, g.ijk.jdata.float()), ValueError, r"max_pool: kernel_size must be an int or three ints, each in"),
    (lambda g: tg.GridBatch.from_dense(1, [2**70, 1, 1]), ValueError, r"from_dense: dense_dims must be an int or three ints, each in \[0, "),
    (lambda g: tg.GridBatch.from_dense(1, [[2], [2], [2]]), TypeError, r"from_dense: dense_dims must be an int or three ints"),
    (lambda g: tg.GridBatch.from_dense(1.0, [2, 2, 2]), TypeError, r"from_dense: num_grids must be an int, got float"),
    (lambda g: tg.GridBatch.from_dense(0, [2, 2, 2]), ValueError, r"from_dense: num_grids must be >= 1, got 0"),
    (lambda g: tg.GridBatch.from_dense(1, [2, 2, 2], ijk_min=[0, 0]), ValueError, r"from_dense: ijk_min must be three ints"),
    (lambda g: tg.GridBatch.from_dense(1, [2, 2, 2], ijk_min=[0, 0, 2**70]), ValueError, r"from_dense: the box leaves the int32 range"),
    (lambda g: tg.GridBatch.from_dense(1, [2000] * 3), ValueError, r"from_dense: 1 grids of 2000 x 2000 x 2000 voxels would be 8000000000 voxels"),
    (lambda g: tg.GridBatch.from_dense(2**40, [1] * 3), ValueError, r"from_dense: 1099511627776 grids of 1 x 1 x 1 voxels"),
    (lambda g: tg.GridBatch.from_dense(1, [2, 2, 2], voxel_sizes=[1, 2]), ValueError, r"voxel_sizes must be \[3\] or \[1, 3\], got \[2\]"),
    (lambda g: tg.GridBatch.from_dense(1, [2, 2, 2], voxel_sizes="a"), TypeError, r"voxel_sizes must be a number, three numbers or \[1, 3\] numbers"),
    (lambda g: tg.GridBatch.from_points(tg.JaggedTensor([torch.rand(4, 3)]), voxel_sizes=10**400), TypeError, r"voxel_sizes must be a number"),
    (lambda g: tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(2, 3, dtype=torch.int16)])), TypeError, r"from_ijk: ijk must be int32, got int16"),
    (lambda g: tg.ConvolutionPlan.from_grid_batch(3, 1, g.ijk.jdata), TypeError, r"ConvolutionPlan: source_grid must be a GridBatch, got Tensor"),
    (lambda g: tg.ConvolutionPlan.from_grid_batch(3, 1, g, "grid"), TypeError, r"ConvolutionPlan: target_grid must be a GridBatch, got str"),
    (lambda g: tg.ConvolutionPlan.from_grid_batch(3, 1, g, g).execute([[0.0]] * 8, torch.ones(1, 1, 3, 3, 3)), TypeError, r"execute: data must be a torch.Tensor or JaggedTensor, got list"),
    (lambda g: tg.ConvolutionPlan.from_grid_batch(3, 1, g, g).execute(torch.ones(8, 1), [1.0]), TypeError, r"execute: weights must be a torch.Tensor, got list"),
    (lambda g: g.max_pool(2, [[1.0]] * 8), TypeError, r"max_pool: data must be a torch.Tensor or JaggedTensor, got list"),
    (lambda g: g.avg_pool(2, torch.ones(8, 1), coarse_grid=torch.ones(1)), TypeError, r"avg_pool: coarse_grid must be a GridBatch or None, got Tensor"),
])
def test_integer_and_size_arguments_get_clear_errors(call, error, message):
    grid = tg.GridBatch.from_dense(1, [2, 2, 2])
    with pytest.raises(error, match=message):
        call(grid)


def test_integer_arguments_may_be_numpy_or_torch_integers():
    import numpy as np

    grid = tg.GridBatch.from_dense(np.int64(1), np.array([2, 3, 4]), ijk_min=torch.tensor([1, 0, 0]))
    assert grid.total_voxels == 24 and grid.bboxes[0].tolist() == [[1, 0, 0], [2, 2, 3]]
    assert grid.conv_grid(np.array([3, 3, 3]), torch.tensor(1)).total_voxels == grid.conv_grid(3, 1).total_voxels
    assert grid.coarsened_grid(np.int32(2)).total_voxels == grid.coarsened_grid(2).total_voxels
    assert grid.dilated_grid(np.int64(1)).total_voxels == grid.dilated_grid(1).total_voxels
