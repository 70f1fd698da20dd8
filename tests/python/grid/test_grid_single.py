"""tilegrid.Grid, fVDB's single-grid class over a GridBatch of one grid: every builder,
property and method gives what the GridBatch call gives on the same one-grid batch (its
JaggedTensors unwrapped to tensors, its per-grid [1, ...] values to the grid's, its GridBatches
to Grids), on random grids, on the CPU and, where there is one, the GPU; conversions both ways;
fVDB's argument names, order and defaults (a table of fvdb-core's Grid, below); every fVDB Grid
member either here or on the list of those GridBatch cannot serve; bad inputs refused naming
the argument."""

import copy
import inspect
import re
from types import SimpleNamespace

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def J(t: torch.Tensor) -> tg.JaggedTensor:
    return tg.JaggedTensor([t])


def random_batch(device, count=300, spread=8) -> tg.GridBatch:
    """A one-grid batch of random voxels, voxel size and origin."""
    ijk = torch.randint(-spread, spread, (count, 3), dtype=torch.int32)
    sizes = (torch.rand(3) * 0.9 + 0.1).tolist()
    origins = torch.randn(3).tolist()
    return tg.GridBatch.from_ijk(J(ijk), voxel_sizes=sizes, origins=origins).to(device)


def random_grid(device, **kwargs) -> tuple[tg.Grid, tg.GridBatch]:
    batch = random_batch(device, **kwargs)
    return tg.Grid.from_grid_batch(batch), batch


def assert_same(got, want):
    """got (a Grid call's result) equals want (the GridBatch call's), unwrapped."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b)
    elif isinstance(want, tg.GridBatch):
        assert isinstance(got, tg.Grid), f"expected a Grid, got {type(got).__name__}"
        assert got.grid_batch.num_grids == 1 and got.device == want.device
        assert torch.equal(got.ijk, want.ijk.jdata)
        assert torch.equal(got.grid_batch.voxel_sizes, want.voxel_sizes)
        assert torch.equal(got.grid_batch.origins, want.origins)
    elif isinstance(want, tg.JaggedTensor) and isinstance(got, tg.JaggedTensor):
        assert torch.equal(got.joffsets, want.joffsets)
        assert_same(got.jdata, want.jdata)
    elif isinstance(want, tg.JaggedTensor):
        assert want.num_tensors == 1
        assert_same(got, want.jdata)
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
        assert got.device == want.device and got.dtype == want.dtype and got.shape == want.shape
        if want.is_floating_point() and want.is_cuda:  # atomics may sum in another order
            torch.testing.assert_close(got, want, equal_nan=True)
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        assert got == want


def inputs(grid: tg.Grid, device) -> SimpleNamespace:
    """Random arguments for the grid's methods: points near its voxels and far away,
    coordinates half active, features, masks, rays, another grid."""
    n = grid.num_voxels
    centres = grid.voxel_to_world(grid.ijk[torch.randint(0, n, (40,), device=device)])
    points = torch.cat([centres.float() + (torch.rand(40, 3, device=device) - 0.5)
                        * grid.voxel_size.float() * 1.9,
                        torch.randn(5, 3, device=device) * 50])
    ijk = torch.cat([grid.ijk[torch.randint(0, n, (30,), device=device)],
                     torch.randint(-10, 10, (30, 3), dtype=torch.int32, device=device)])
    targets = centres[:20].double()
    ray_origins = targets + torch.randn(20, 3, dtype=torch.float64, device=device) * 20
    other, other_batch = random_grid(device)
    other = tg.Grid.from_grid_batch(tg.GridBatch.from_ijk(
        J(other.ijk), voxel_sizes=grid.voxel_size.tolist(), origins=grid.origin.tolist()))
    return SimpleNamespace(
        points=points, ijk=ijk, features=torch.randn(n, 2, device=device),
        field=torch.randn(n, device=device), mask=torch.rand(n, device=device) < 0.5,
        point_values=torch.randn(points.shape[0], 3, device=device),
        ray_origins=ray_origins, ray_directions=targets - ray_origins,
        other=other, other_features=torch.randn(other.num_voxels, 2, device=device),
        t_min=torch.rand(20, dtype=torch.float64, device=device),
        dense_cminor=torch.randn(1, 9, 8, 7, 2, device=device),
        dense_cmajor=torch.randn(1, 2, 9, 8, 7, device=device),
        src_ijk=torch.unique(ijk, dim=0), zeros=torch.zeros(n, 3, device=device),
    )


def both(grid_call, batch_call=None):
    """A case: how to call the Grid (o: a Grid, w: the identity, g: the identity) and the
    GridBatch (o: its batch, w: a tensor as a JaggedTensor of one, g: a Grid's batch); one
    function serves both unless the calls differ in more than that."""
    return grid_call, batch_call or grid_call


# name -> (grid call, batch call), each (o, x, w, g) -> result.
CASES = {
    "voxel_to_world": both(lambda o, x, w, g: o.voxel_to_world(w(x.ijk))),
    "world_to_voxel": both(lambda o, x, w, g: o.world_to_voxel(w(x.points))),
    "ijk_to_index": both(lambda o, x, w, g: o.ijk_to_index(w(x.ijk))),
    "ijk_to_index_cumulative": both(lambda o, x, w, g: o.ijk_to_index(w(x.ijk), cumulative=True)),
    "ijk_to_inv_index": both(lambda o, x, w, g: o.ijk_to_inv_index(w(x.ijk))),
    "points_in_grid": both(lambda o, x, w, g: o.points_in_grid(w(x.points))),
    "coords_in_grid": both(lambda o, x, w, g: o.coords_in_grid(w(x.ijk))),
    "cubes_in_grid": both(lambda o, x, w, g: o.cubes_in_grid(w(x.points), -0.3, [0.2, 0.4, 0.1])),
    "cubes_intersect_grid": both(lambda o, x, w, g: o.cubes_intersect_grid(w(x.points), -1, 1)),
    "neighbor_indexes": both(lambda o, x, w, g: o.neighbor_indexes(w(x.ijk), 1, bitshift=1)),
    "coarsened_grid": both(lambda o, x, w, g: o.coarsened_grid([2, 1, 3])),
    "refined_grid": both(lambda o, x, w, g: o.refined_grid(2)),
    "refined_grid_mask": both(lambda o, x, w, g: o.refined_grid(2, mask=x.mask)),
    "dual_grid": both(lambda o, x, w, g: o.dual_grid()),
    "dual_grid_exclude_border": both(lambda o, x, w, g: o.dual_grid(exclude_border=True)),
    "dilated_grid": both(lambda o, x, w, g: o.dilated_grid(1)),
    "merged_grid": both(lambda o, x, w, g: o.merged_grid(g(x.other))),
    "pruned_grid": both(lambda o, x, w, g: o.pruned_grid(x.mask)),
    "clipped_grid": both(lambda o, x, w, g: o.clipped_grid(-3, [4, 2, 5])),
    "clip": both(lambda o, x, w, g: o.clip(x.features, [-4, -2, -3], 3)),
    "contiguous": both(lambda o, x, w, g: o.contiguous()),
    "conv_grid": both(lambda o, x, w, g: o.conv_grid(3, stride=2)),
    "conv_transpose_grid": both(lambda o, x, w, g: o.conv_transpose_grid(2, stride=2)),
    "sample_nearest": both(lambda o, x, w, g: o.sample_nearest(w(x.points), x.features)),
    "sample_trilinear": both(lambda o, x, w, g: o.sample_trilinear(w(x.points), x.features)),
    "sample_trilinear_with_grad": both(
        lambda o, x, w, g: o.sample_trilinear_with_grad(w(x.points), x.features)),
    "sample_bezier": both(lambda o, x, w, g: o.sample_bezier(w(x.points), x.features)),
    "sample_bezier_with_grad": both(
        lambda o, x, w, g: o.sample_bezier_with_grad(w(x.points), x.features)),
    "splat_trilinear": both(lambda o, x, w, g: o.splat_trilinear(w(x.points), x.point_values)),
    "splat_bezier": both(lambda o, x, w, g: o.splat_bezier(w(x.points), x.point_values)),
    "avg_pool": both(lambda o, x, w, g: o.avg_pool(2, x.features)),
    "max_pool": both(lambda o, x, w, g: o.max_pool([2, 1, 2], x.features, stride=1)),
    "max_pool_coarse_grid": both(
        lambda o, x, w, g: o.max_pool(2, x.features, coarse_grid=g(x.other).coarsened_grid(2))),
    "refine": both(lambda o, x, w, g: o.refine(2, x.features)),
    "refine_mask_and_fine_grid": (
        lambda o, x, w, g: o.refine(2, x.features, mask=x.mask, refined=x.other.refined_grid(2)),
        lambda o, x, w, g: o.refine(2, x.features, x.mask, x.other.grid_batch.refined_grid(2))),
    "voxels_along_rays": (
        lambda o, x, w, g: o.voxels_along_rays(x.ray_origins, x.ray_directions, 50),
        lambda o, x, w, g: o.voxels_along_rays(J(x.ray_origins), J(x.ray_directions), 50,
                                               return_ijk=False)),
    "voxels_along_rays_ijk": both(lambda o, x, w, g: o.voxels_along_rays(
        w(x.ray_origins), w(x.ray_directions), 7, eps=0.01, return_ijk=True)),
    "segments_along_rays": both(lambda o, x, w, g: o.segments_along_rays(
        w(x.ray_origins), w(x.ray_directions), 10)),
    "uniform_ray_samples": both(lambda o, x, w, g: o.uniform_ray_samples(
        w(x.ray_origins), w(x.ray_directions), 0.0, 100.0, 0.3, include_end_segments=False)),
    "uniform_ray_samples_per_ray": both(lambda o, x, w, g: o.uniform_ray_samples(
        w(x.ray_origins), w(x.ray_directions), x.t_min, x.t_min + 60, 0.2,
        cone_angle=0.01, return_midpoints=True)),
    "ray_implicit_intersection": both(lambda o, x, w, g: o.ray_implicit_intersection(
        w(x.ray_origins), w(x.ray_directions), x.field.double())),
    "rays_intersect_voxels": both(lambda o, x, w, g: o.rays_intersect_voxels(
        w(x.ray_origins), w(x.ray_directions), eps=0.001)),
    "inject_to_dense_cminor": both(lambda o, x, w, g: o.inject_to_dense_cminor(x.features)),
    "inject_to_dense_cmajor": both(
        lambda o, x, w, g: o.inject_to_dense_cmajor(x.features, [-3, -2, -1], [5, 6, 7])),
    "inject_from_dense_cminor": both(
        lambda o, x, w, g: o.inject_from_dense_cminor(x.dense_cminor, [-4, -3, -2])),
    "inject_from_dense_cmajor": both(lambda o, x, w, g: o.inject_from_dense_cmajor(x.dense_cmajor)),
    "inject_from": both(lambda o, x, w, g: o.inject_from(g(x.other), x.other_features,
                                                         default_value=-1.0)),
    "inject_to": both(lambda o, x, w, g: o.inject_to(g(x.other), x.features)),
    "inject_to_dst": both(lambda o, x, w, g: o.inject_to(g(x.other), x.features,
                                                         x.other_features.clone())),
    "inject_from_ijk": both(lambda o, x, w, g: o.inject_from_ijk(
        w(x.src_ijk), x.src_ijk.float() * 0.5, default_value=3.0)),
    "inject_from_ijk_dst": both(lambda o, x, w, g: o.inject_from_ijk(
        w(x.src_ijk), x.src_ijk.float(), x.zeros.clone())),
    "marching_cubes": both(lambda o, x, w, g: o.marching_cubes(x.field, level=0.1)),
    "marching_cubes_column": both(lambda o, x, w, g: o.marching_cubes(x.field[:, None])),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_method_gives_the_grid_batch_result(device, case):
    grid, batch = random_grid(device)
    x = inputs(grid, device)
    grid_call, batch_call = CASES[case]
    got = grid_call(grid, x, lambda t: t, lambda other: other)
    want = batch_call(batch, x, J, lambda other: other.grid_batch)
    assert_same(got, want)


def test_the_cases_cover_every_wrapped_method():
    """Each method of Grid that wraps a GridBatch method has a case above (or a test below)."""
    tested_elsewhere = {"from_ijk", "from_points", "from_nearest_voxels_to_points", "from_mesh",
                        "from_dense", "from_dense_axis_aligned_bounds", "from_zero_voxels",
                        "from_nanovdb", "save_nanovdb", "from_grid_batch", "to_gridbatch",
                        "integrate_tsdf", "cpu", "cuda", "to", "is_same",
                        "has_same_address_and_grid_count"}
    methods = {n for n, v in vars(tg.Grid).items()
               if not n.startswith("_") and not isinstance(v, property)}
    covered = {c for c in methods if any(case == c or case.startswith(c + "_") for case in CASES)}
    assert methods - covered - tested_elsewhere == set()


PROPERTIES = {
    "device": lambda b: b.device,
    "num_voxels": lambda b: b.total_voxels,
    "voxel_size": lambda b: b.voxel_sizes[0].to(b.device),
    "origin": lambda b: b.origins[0].to(b.device),
    "bbox": lambda b: b.bboxes[0],
    "dual_bbox": lambda b: b.dual_bboxes[0],
    "ijk": lambda b: b.ijk.jdata,
    "voxel_to_world_matrix": lambda b: b.voxel_to_world_matrices[0],
    "world_to_voxel_matrix": lambda b: b.world_to_voxel_matrices[0],
    "num_bytes": lambda b: int(b.num_bytes[0]),
    "num_leaf_nodes": lambda b: int(b.num_leaf_nodes[0]),
    "is_contiguous": lambda b: b.is_contiguous(),
    "has_zero_voxels": lambda b: bool(b.num_voxels[0] == 0),
    "morton": lambda b: b.morton().jdata,
    "morton_zyx": lambda b: b.morton_zyx().jdata,
    "hilbert": lambda b: b.hilbert().jdata,
    "hilbert_zyx": lambda b: b.hilbert_zyx().jdata,
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("empty", [False, True], ids=["voxels", "empty"])
@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_property_gives_the_grid_batch_value(device, name, empty):
    grid, batch = random_grid(device)
    if empty:
        batch = tg.GridBatch.from_zero_voxels(device, [0.5, 1.0, 2.0], [1.0, -2.0, 0.5])
        grid = tg.Grid(batch)
    got, want = getattr(grid, name), PROPERTIES[name](batch)
    assert type(got) is type(want)
    assert_same(got, want)


def test_every_property_is_checked():
    properties = {n for n, v in vars(tg.Grid).items() if isinstance(v, property)}
    assert properties - set(PROPERTIES) == {"grid_batch"}


@pytest.mark.parametrize("device", DEVICES)
def test_builders_give_the_grid_batch_grids(device):
    ijk = torch.randint(-20, 20, (200, 3), dtype=torch.int32, device=device)
    points = torch.randn(150, 3, device=device) * 4
    vertices = torch.rand(30, 3, dtype=torch.float64, device=device) * 6
    faces = torch.randint(0, 30, (20, 3), device=device)
    size, origin = [0.5, 0.25, 1.0], [0.1, -0.2, 0.3]
    mask = torch.rand(3, 4, 5, device=device) < 0.5
    pairs = [
        (tg.Grid.from_ijk(ijk, size, origin), tg.GridBatch.from_ijk(J(ijk), size, origin)),
        (tg.Grid.from_ijk(ijk.long(), voxel_size=0.3), tg.GridBatch.from_ijk(J(ijk), 0.3)),
        (tg.Grid.from_points(points, size, origin),
         tg.GridBatch.from_points(J(points), size, origin)),
        (tg.Grid.from_points(points), tg.GridBatch.from_points(J(points))),
        (tg.Grid.from_nearest_voxels_to_points(points, 0.7, origin=origin),
         tg.GridBatch.from_nearest_voxels_to_points(J(points), 0.7, origin)),
        (tg.Grid.from_mesh(vertices, faces, voxel_size=0.5),
         tg.GridBatch.from_mesh(J(vertices), J(faces), 0.5)),
        (tg.Grid.from_dense([3, 4, 5], ijk_min=[-1, 0, 2], voxel_size=size, origin=origin,
                            device=device),
         tg.GridBatch.from_dense(1, [3, 4, 5], [-1, 0, 2], size, origin, device=device)),
        (tg.Grid.from_dense([3, 4, 5], mask=mask),
         tg.GridBatch.from_dense(1, [3, 4, 5], mask=mask)),
        (tg.Grid.from_dense_axis_aligned_bounds(4, [-1, 0, 0], [1, 2, 3], device=device),
         tg.GridBatch.from_dense_axis_aligned_bounds(1, 4, [-1, 0, 0], [1, 2, 3], device=device)),
        (tg.Grid.from_dense_axis_aligned_bounds([2, 3, 4], voxel_center=True, device=device),
         tg.GridBatch.from_dense_axis_aligned_bounds(1, [2, 3, 4], 0, 1, True, device)),
        (tg.Grid.from_zero_voxels(device, size, origin),
         tg.GridBatch.from_zero_voxels(device, size, origin)),
    ]
    for got, want in pairs:
        assert_same(got, want)
    assert tg.Grid.from_zero_voxels().has_zero_voxels
    assert tg.Grid.from_dense(2).num_voxels == 8 and tg.Grid.from_dense(2).device.type == "cpu"
    default = tg.Grid.from_ijk(ijk)
    assert default.voxel_size.tolist() == [1.0] * 3 and default.origin.tolist() == [0.0] * 3


@pytest.mark.parametrize("device", DEVICES)
def test_integrate_tsdf_gives_the_grid_batch_result(device):
    points = torch.rand(400, 3, dtype=torch.float64, device=device) * 2 - 1
    points[:, 2] += 3
    grid = tg.Grid.from_points(points, voxel_size=0.1)
    K = torch.tensor([[40.0, 0, 16], [0, 40.0, 12], [0, 0, 1]], dtype=torch.float64)
    pose = torch.eye(4, dtype=torch.float64)
    depth = (3 + 0.2 * torch.rand(24, 32, dtype=torch.float64)).to(device)
    weight_image = torch.rand(24, 32, dtype=torch.float64, device=device)
    tsdf = torch.rand(grid.num_voxels, dtype=torch.float64, device=device) * 0.1
    weights = torch.rand(grid.num_voxels, dtype=torch.float64, device=device)
    want = grid.grid_batch.integrate_tsdf(0.3, K[None], pose[None], tsdf, weights, depth[None],
                                          weight_image[None])
    assert_same(grid.integrate_tsdf(0.3, K, pose, tsdf, weights, depth, weight_image), want)
    got = grid.integrate_tsdf(0.3, K[None], pose[None], tsdf[:, None], weights[:, None],
                              depth[None], weight_images=weight_image[None])
    assert_same(got, tuple(want[:1]) + tuple(t.jdata[:, None] for t in want[1:]))
    assert got[0].num_voxels > grid.num_voxels


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_reach_the_grids_inputs(device):
    grid, batch = random_grid(device)
    x = inputs(grid, device)
    grads = []
    for call in (lambda p, f: grid.sample_trilinear(p, f),
                 lambda p, f: batch.sample_trilinear(J(p), f).jdata):
        p = x.points.clone().requires_grad_()
        f = x.features.clone().requires_grad_()
        (call(p, f) ** 2).sum().backward()
        grads.append((p.grad, f.grad))
    torch.testing.assert_close(grads[0], grads[1])
    assert grads[0][1].abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
def test_conversions_both_ways(device):
    three = tg.GridBatch.from_ijk(tg.JaggedTensor(
        [torch.randint(-5, 5, (n, 3), dtype=torch.int32) for n in (30, 0, 50)]),
        voxel_sizes=[[1, 1, 1], [0.5, 0.5, 0.5], [2, 1, 2]]).to(device)
    second = three[2]
    grid = tg.Grid(second)
    assert grid.grid_batch is second and grid.to_gridbatch() is second
    assert tg.Grid.from_grid_batch(second).is_same(grid)
    assert grid.has_same_address_and_grid_count(second)
    assert grid.has_same_address_and_grid_count(tg.Grid(second))
    assert not grid.has_same_address_and_grid_count(three[2]) and not grid.is_same(second)
    assert torch.equal(grid.ijk, three.ijk[2]) and grid.voxel_size.tolist() == [2.0, 1.0, 2.0]
    assert tg.Grid(three[1]).has_zero_voxels and tg.Grid(three[1]).bbox.tolist() == [[0] * 3] * 2
    # Grids go back into batches: jcat of their batches holds them in order.
    back = tg.jcat([g.to_gridbatch() for g in (tg.Grid(three[0]), tg.Grid(three[1]), grid)])
    assert torch.equal(back.ijk.jdata, three.ijk.jdata)
    derived = grid.dilated_grid(1)
    assert isinstance(derived, tg.Grid) and derived.grid_batch.num_grids == 1
    for make in (copy.copy, copy.deepcopy):
        twin = make(grid)
        assert isinstance(twin, tg.Grid) and twin.is_same(grid)
        assert torch.equal(twin.ijk, grid.ijk)
    assert repr(grid) == (f"Grid(num_voxels={grid.num_voxels}, voxel_size=[2.0, 1.0, 2.0], "
                          f"origin=[0.0, 0.0, 0.0], device={grid.device})")
    with pytest.raises(AttributeError, match="Grid is immutable"):
        grid.voxel_size = 2


@pytest.mark.parametrize("device", DEVICES)
def test_to_takes_fvdbs_targets(device):
    grid, _ = random_grid(device)
    here = [device, torch.device(device), torch.zeros(1, device=device),
            J(torch.zeros(1, device=device)), grid, grid.grid_batch]
    for target in here:
        assert grid.to(target) is grid
    moved = grid.cpu()
    assert moved.device.type == "cpu" and torch.equal(moved.ijk.cpu(), grid.ijk.cpu())
    assert torch.equal(moved.voxel_size, grid.voxel_size.cpu())
    if torch.cuda.is_available():
        on_gpu = moved.cuda()
        assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.ijk.cpu(), grid.ijk.cpu())
        assert on_gpu.to(moved).device.type == "cpu"
        assert moved.to(on_gpu.grid_batch).device == on_gpu.device


@pytest.mark.parametrize("device", DEVICES)
def test_nanovdb_round_trip(device, tmp_path, capsys):
    grid, _ = random_grid(device)
    data = torch.randn(grid.num_voxels, 3, device=device)
    path = tmp_path / "one.nvdb"
    grid.save_nanovdb(path, data, name="room", verbose=True)
    assert "save_nanovdb" in capsys.readouterr().out
    for kwargs in ({}, {"index": 0}, {"index": -1}, {"name": "room"}):
        back, back_data, name = tg.Grid.from_nanovdb(path, device=device, **kwargs)
        assert name == "room" and back.device == grid.device
        assert torch.equal(back.ijk, grid.ijk) and torch.equal(back_data, data)
        assert torch.equal(back.voxel_size, grid.voxel_size)
    tg.Grid.from_nanovdb(str(path), verbose=True)
    assert "grid 0 ('room')" in capsys.readouterr().out

    # A file of several grids: pick one by index or name; a grid stored without data.
    batch = tg.GridBatch.from_ijk(tg.JaggedTensor(
        [torch.randint(-5, 5, (n, 3), dtype=torch.int32) for n in (20, 40)]), 0.5)
    many = tmp_path / "two.nvdb"
    tg.save(many, batch, names=["a", "b"])
    second, second_data, name = tg.Grid.from_nanovdb(many, name="b")
    assert name == "b" and torch.equal(second.ijk, batch.ijk[1])
    assert second_data.shape == (0,) and second_data.dtype == torch.float32
    assert tg.Grid.from_nanovdb(many, index=1)[2] == "b"
    with pytest.raises(ValueError, match="holds no grid named 'c'; its grids are"):
        tg.Grid.from_nanovdb(many, name="c")
    with pytest.raises(IndexError, match="Grid.from_nanovdb: index 2 out of range for the 2 grids"):
        tg.Grid.from_nanovdb(many, index=2)
    with pytest.raises(TypeError, match="Grid.from_nanovdb: index must be an int"):
        tg.Grid.from_nanovdb(many, index=0.5)
    layered = tmp_path / "layers.nvdb"
    n = batch.total_voxels
    tg.save(layered, batch, features=[torch.zeros(n), torch.ones(n)])
    with pytest.raises(ValueError, match="stores 2 feature arrays a grid"):
        tg.Grid.from_nanovdb(layered)
    with pytest.raises(NotImplementedError, match="compressed"):
        grid.save_nanovdb(tmp_path / "c.nvdb", compressed=True)


# fVDB's Grid (fvdb-core, fvdb/grid.py): argument names and defaults of every method ("kw":
# keyword-only), and its properties.
KW = "kw"
FVDB_GRID_SIGNATURES = {
    "from_dense": [("dense_dims", None), ("ijk_min", 0), ("voxel_size", 1), ("origin", 0),
                   ("mask", None), ("device", None)],
    "from_dense_axis_aligned_bounds": [("dense_dims", None), ("bounds_min", 0),
                                       ("bounds_max", 1), ("voxel_center", False),
                                       ("device", "cpu")],
    "from_ijk": [("ijk", None), ("voxel_size", 1), ("origin", 0)],
    "from_mesh": [("mesh_vertices", None), ("mesh_faces", None), ("voxel_size", 1),
                  ("origin", 0)],
    "from_points": [("points", None), ("voxel_size", 1), ("origin", 0)],
    "from_nearest_voxels_to_points": [("points", None), ("voxel_size", 1), ("origin", 0)],
    "from_zero_voxels": [("device", "cpu"), ("voxel_size", 1), ("origin", 0)],
    "from_nanovdb": [("path", None), ("index", 0, KW), ("name", None, KW), ("device", "cpu", KW),
                     ("verbose", False, KW)],
    "voxel_to_world": [("ijk", None)],
    "world_to_voxel": [("points", None)],
    "ijk_to_index": [("ijk", None), ("cumulative", False)],
    "ijk_to_inv_index": [("ijk", None), ("cumulative", False)],
    "points_in_grid": [("points", None)],
    "coords_in_grid": [("ijk", None)],
    "cubes_in_grid": [("cube_centers", None), ("cube_min", 0.0), ("cube_max", 0.0)],
    "cubes_intersect_grid": [("cube_centers", None), ("cube_min", 0.0), ("cube_max", 0.0)],
    "neighbor_indexes": [("ijk", None), ("extent", None), ("bitshift", 0)],
    "coarsened_grid": [("coarsening_factor", None)],
    "refined_grid": [("subdiv_factor", None), ("mask", None)],
    "dual_grid": [("exclude_border", False)],
    "dilated_grid": [("dilation", None)],
    "merged_grid": [("other", None)],
    "pruned_grid": [("mask", None)],
    "clipped_grid": [("ijk_min", None), ("ijk_max", None)],
    "clip": [("features", None), ("ijk_min", None), ("ijk_max", None)],
    "contiguous": [],
    "conv_grid": [("kernel_size", None), ("stride", 1)],
    "conv_transpose_grid": [("kernel_size", None), ("stride", 1)],
    "sample_nearest": [("points", None), ("voxel_data", None)],
    "sample_trilinear": [("points", None), ("voxel_data", None)],
    "sample_trilinear_with_grad": [("points", None), ("voxel_data", None)],
    "sample_bezier": [("points", None), ("voxel_data", None)],
    "sample_bezier_with_grad": [("points", None), ("voxel_data", None)],
    "splat_trilinear": [("points", None), ("points_data", None)],
    "splat_bezier": [("points", None), ("points_data", None)],
    "avg_pool": [("pool_factor", None), ("data", None), ("stride", 0), ("coarse_grid", None)],
    "max_pool": [("pool_factor", None), ("data", None), ("stride", 0), ("coarse_grid", None)],
    "refine": [("subdiv_factor", None), ("data", None), ("mask", None), ("refined", None)],
    "voxels_along_rays": [("ray_origins", None), ("ray_directions", None), ("max_voxels", None),
                          ("eps", 0.0), ("return_ijk", False)],
    "segments_along_rays": [("ray_origins", None), ("ray_directions", None),
                            ("max_segments", None), ("eps", 0.0)],
    "uniform_ray_samples": [("ray_origins", None), ("ray_directions", None), ("t_min", None),
                            ("t_max", None), ("step_size", None), ("cone_angle", 0.0),
                            ("include_end_segments", True), ("return_midpoints", False),
                            ("eps", 0.0)],
    "ray_implicit_intersection": [("ray_origins", None), ("ray_directions", None),
                                  ("grid_scalars", None), ("eps", 0.0)],
    "rays_intersect_voxels": [("ray_origins", None), ("ray_directions", None), ("eps", 0.0)],
    "inject_from_dense_cminor": [("dense_data", None), ("dense_origin", 0)],
    "inject_from_dense_cmajor": [("dense_data", None), ("dense_origin", 0)],
    "inject_to_dense_cminor": [("sparse_data", None), ("min_coord", None), ("grid_size", None)],
    "inject_to_dense_cmajor": [("sparse_data", None), ("min_coord", None), ("grid_size", None)],
    "inject_from": [("src_grid", None), ("src", None), ("dst", None), ("default_value", 0)],
    "inject_to": [("dst_grid", None), ("src", None), ("dst", None), ("default_value", 0)],
    "inject_from_ijk": [("src_ijk", None), ("src", None), ("dst", None), ("default_value", 0)],
    "marching_cubes": [("field", None), ("level", 0.0)],
    "integrate_tsdf": [("truncation_distance", None), ("projection_matrices", None),
                       ("cam_to_world_matrices", None), ("tsdf", None), ("weights", None),
                       ("depth_images", None), ("weight_images", None)],
    "cpu": [],
    "cuda": [],
    "to": [("target", None)],
    "save_nanovdb": [("path", None), ("data", None), ("name", None), ("compressed", False),
                     ("verbose", False)],
    "is_same": [("other", None)],
    "has_same_address_and_grid_count": [("other", None)],
    "to_gridbatch": [],
}
FVDB_GRID_PROPERTIES = {
    "device", "num_voxels", "voxel_size", "origin", "bbox", "dual_bbox", "ijk",
    "voxel_to_world_matrix", "world_to_voxel_matrix", "num_bytes", "num_leaf_nodes",
    "is_contiguous", "has_zero_voxels", "morton", "morton_zyx", "hilbert", "hilbert_zyx",
}
# fVDB Grid members that tilegrid's GridBatch has no counterpart for (no stubs here).
LEFT_OUT = {"reinitialize_sdf", "retopologize_sdf", "integrate_tsdf_with_features",
            "edge_network"}


@pytest.mark.parametrize("name", sorted(FVDB_GRID_SIGNATURES))
def test_method_has_fvdbs_signature(name):
    params = list(inspect.signature(getattr(tg.Grid, name)).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    empty = inspect.Parameter.empty
    got = [(p.name, None if p.default is empty else p.default)
           + ((KW,) if p.kind is inspect.Parameter.KEYWORD_ONLY else ()) for p in params]
    assert got == FVDB_GRID_SIGNATURES[name]


def test_every_fvdb_member_is_here_or_listed_as_left_out():
    fvdb = set(FVDB_GRID_SIGNATURES) | FVDB_GRID_PROPERTIES
    assert not LEFT_OUT & fvdb
    for name in sorted(FVDB_GRID_PROPERTIES):
        assert isinstance(vars(tg.Grid).get(name), property), name
    for name in sorted(fvdb):
        assert hasattr(tg.Grid, name), name
    for name in sorted(LEFT_OUT):
        assert not hasattr(tg.Grid, name), name  # left out, not stubbed


def public_members():
    return sorted(n for n in vars(tg.Grid) if not n.startswith("_"))


@pytest.mark.parametrize("name", public_members())
def test_member_docstring_names_every_argument(name):
    member = vars(tg.Grid)[name]
    function = member.fget if isinstance(member, property) else getattr(tg.Grid, name)
    doc = function.__doc__ or ""
    assert doc.strip(), f"Grid.{name} has no docstring"
    if isinstance(member, property):
        return
    names = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    missing = [a for a in names if not re.search(rf"(?<![\w.]){re.escape(a)}(?!\w)", doc)]
    assert not missing, f"Grid.{name}'s docstring does not name {missing}"


def bad_calls():
    """(call, exception, message) for arguments of the wrong kind."""
    grid, batch = random_grid("cpu")
    ijk, points = grid.ijk, torch.randn(10, 3)
    features = torch.randn(grid.num_voxels, 2)
    two = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk, ijk]))
    return [
        (lambda: tg.Grid(two), ValueError, r"Grid: grid_batch must hold exactly one grid, got 2"),
        (lambda: tg.Grid(tg.GridBatch.from_zero_grids()), ValueError, "exactly one grid, got 0"),
        (lambda: tg.Grid(ijk), TypeError, "Grid: grid_batch must be a GridBatch, got Tensor"),
        (lambda: tg.Grid.from_grid_batch(J(ijk)), TypeError,
         "grid_batch must be a GridBatch, got a JaggedTensor"),
        (lambda: tg.Grid.from_ijk(J(ijk)), TypeError,
         "Grid.from_ijk: ijk must be a torch.Tensor, got a JaggedTensor"),
        (lambda: tg.Grid.from_ijk(ijk.tolist()), TypeError,
         "Grid.from_ijk: ijk must be a torch.Tensor, got list"),
        (lambda: tg.Grid.from_ijk(ijk, voxel_size=[[1, 1, 1]]), ValueError,
         r"Grid.from_ijk: voxel_size must be a number or three numbers \(one grid\)"),
        (lambda: tg.Grid.from_points(points, origin="a"), TypeError,
         "Grid.from_points: origin must be a number or three numbers"),
        (lambda: tg.Grid.from_mesh(points, [[0, 1, 2]]), TypeError,
         "Grid.from_mesh: mesh_faces must be a torch.Tensor, got list"),
        (lambda: tg.Grid.from_dense(3, mask=[[[True]]]), TypeError,
         "Grid.from_dense: mask must be a bool torch.Tensor or None, got list"),
        (lambda: tg.Grid.from_dense([2, 2]), ValueError, "Grid.from_dense: dense_dims"),
        (lambda: tg.Grid.from_zero_voxels(voxel_size=[1, 2]), ValueError,
         "Grid.from_zero_voxels: voxel_size"),
        (lambda: grid.sample_trilinear(J(points), features), TypeError,
         "Grid.sample_trilinear: points must be a torch.Tensor, got a JaggedTensor"),
        (lambda: grid.sample_bezier(points, grid.grid_batch.jagged_like(features)), TypeError,
         "Grid.sample_bezier: voxel_data must be a torch.Tensor, got a JaggedTensor"),
        (lambda: grid.splat_trilinear(points, points.tolist()), TypeError,
         "Grid.splat_trilinear: points_data must be a torch.Tensor, got list"),
        (lambda: grid.ijk_to_index(torch.tensor(1)), ValueError,
         "Grid.ijk_to_index: ijk must have at least one dimension"),
        (lambda: grid.world_to_voxel(points.tolist()), TypeError,
         "Grid.world_to_voxel: points must be a torch.Tensor"),
        (lambda: grid.merged_grid(batch), TypeError,
         r"Grid.merged_grid: other must be a Grid, got GridBatch \(wrap it with"),
        (lambda: grid.inject_from(grid, J(features)), TypeError,
         "Grid.inject_from: src must be a torch.Tensor, got a JaggedTensor"),
        (lambda: grid.inject_to(batch, features), TypeError,
         "Grid.inject_to: dst_grid must be a Grid"),
        (lambda: grid.inject_from(grid, features, dst=J(features)), TypeError,
         "Grid.inject_from: dst must be a torch.Tensor"),
        (lambda: grid.avg_pool(2, features, coarse_grid=batch), TypeError,
         "Grid.avg_pool: coarse_grid must be a Grid"),
        (lambda: grid.max_pool(2, J(features)), TypeError,
         "Grid.max_pool: data must be a torch.Tensor"),
        (lambda: grid.refine(2, features, refined=batch), TypeError,
         "Grid.refine: refined must be a Grid"),
        (lambda: grid.refined_grid(2, mask=[True]), TypeError,
         "Grid.refined_grid: mask must be a torch.Tensor, got list"),
        (lambda: grid.pruned_grid(J(features[:, 0] > 0)), TypeError,
         "Grid.pruned_grid: mask must be a torch.Tensor"),
        (lambda: grid.clipped_grid([[0, 0, 0]], 3), ValueError,
         r"Grid.clipped_grid: ijk_min must be a number or three numbers \(one grid\)"),
        (lambda: grid.clip(features, 0, [1, 2, 3, 4]), ValueError, "Grid.clip: ijk_max"),
        (lambda: grid.voxels_along_rays(J(points), points, 4), TypeError,
         "Grid.voxels_along_rays: ray_origins must be a torch.Tensor"),
        (lambda: grid.uniform_ray_samples(points, points, [0.0], 1.0, 0.1), TypeError,
         "Grid.uniform_ray_samples: t_min must be a torch.Tensor"),
        (lambda: grid.ray_implicit_intersection(points, points, J(features[:, 0])), TypeError,
         "Grid.ray_implicit_intersection: grid_scalars must be a torch.Tensor"),
        (lambda: grid.inject_from_dense_cminor(torch.zeros(1, 2, 2, 2), [[0, 0, 0]]), ValueError,
         "Grid.inject_from_dense_cminor: dense_origin"),
        (lambda: grid.inject_to_dense_cmajor(features, min_coord=[[0, 0, 0]]), ValueError,
         "Grid.inject_to_dense_cmajor: min_coord"),
        (lambda: grid.inject_to_dense_cminor(J(features)), TypeError,
         "Grid.inject_to_dense_cminor: sparse_data must be a torch.Tensor"),
        (lambda: grid.marching_cubes(J(features[:, 0])), TypeError,
         "Grid.marching_cubes: field must be a torch.Tensor"),
        (lambda: grid.integrate_tsdf(0.1, torch.eye(3)[None].repeat(2, 1, 1), torch.eye(4),
                                     features[:, 0], features[:, 0], torch.ones(4, 4)),
         ValueError, "Grid.integrate_tsdf: projection_matrices must have 2 dimensions"),
        (lambda: grid.integrate_tsdf(0.1, torch.eye(3), torch.eye(4), J(features[:, 0]),
                                     features[:, 0], torch.ones(4, 4)),
         TypeError, "Grid.integrate_tsdf: tsdf must be a torch.Tensor"),
        (lambda: grid.to(3), TypeError, "Grid.to: target must be a device"),
        (lambda: grid.save_nanovdb("x.nvdb", J(features)), TypeError,
         "Grid.save_nanovdb: data must be a torch.Tensor"),
        (lambda: grid.save_nanovdb("x.nvdb", name=["a"]), TypeError,
         "Grid.save_nanovdb: name must be a str"),
    ]


@pytest.mark.parametrize("index", range(len(bad_calls())))
def test_bad_input_is_refused_by_name(index):
    call, error, message = bad_calls()[index]
    with pytest.raises(error, match=message):
        call()
