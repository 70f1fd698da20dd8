"""GridBatch's names, properties and defaults as fVDB's (fvdb-core 0.6): ijk a property,
grid_count / joffsets / jidx / cum_voxels, the bounding boxes, voxels_along_rays returning ijk
by default, the argument names of from_mesh and other methods, and the builders' voxel_sizes /
origins defaults; each checked against a brute-force reference on random grids, and the old
spellings against the new ones (with their DeprecationWarning)."""

import inspect

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def random_ijk(counts, spread=30):
    return [torch.unique(torch.randint(-spread, spread, (n, 3), dtype=torch.int32), dim=0) for n in counts]


def random_grid(device, counts=(300, 0, 150)):
    ijk = random_ijk(counts)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[[0.5, 0.25, 1.0], [1, 1, 1], [2, 2, 2]][:len(counts)],
                                 origins=torch.randn(len(counts), 3).tolist())
    return grid.to(device), ijk


def sorted_rows(t: torch.Tensor) -> list:
    return sorted(map(tuple, t.cpu().tolist()))


@pytest.mark.parametrize("device", DEVICES)
def test_ijk_is_a_property_and_calling_it_warns(device):
    grid, ijk = random_grid(device)
    coords = grid.ijk
    assert isinstance(coords, tg.JaggedTensor) and coords.jdata.dtype == torch.int32
    assert coords.jdata.device.type == device
    assert torch.equal(coords.joffsets, grid.voxel_offsets)
    for got, want in zip(coords.unbind(), ijk):
        assert sorted_rows(got) == sorted_rows(want)
    with pytest.warns(DeprecationWarning, match=r"grid\.ijk, not grid\.ijk\(\)"):
        called = grid.ijk()
    assert torch.equal(called.jdata, coords.jdata)


@pytest.mark.parametrize("device", DEVICES)
def test_grid_count_joffsets_jidx_and_cumulative_voxels(device):
    grid, ijk = random_grid(device)
    counts = torch.tensor([len(t) for t in ijk])
    assert grid.grid_count == grid.num_grids == 3
    assert grid.joffsets.tolist() == [0, *torch.cumsum(counts, 0).tolist()]
    assert grid.joffsets.device.type == device
    want_jidx = torch.repeat_interleave(torch.arange(3, dtype=torch.int32), counts)
    assert grid.jidx.dtype == torch.int32 and torch.equal(grid.jidx.cpu(), want_jidx)
    assert grid.cum_voxels.tolist() == [0, int(counts[0]), int(counts[:2].sum())]
    assert [grid.cum_voxels_at(b) for b in (0, 1, 2, -1)] == [0, int(counts[0]), int(counts[:2].sum()),
                                                              int(counts[:2].sum())]
    with pytest.raises(IndexError, match="cum_voxels_at: grid 3 out of range for 3 grids"):
        grid.cum_voxels_at(3)
    assert not grid.has_zero_grids and grid.any_have_zero_voxels and not grid.all_have_zero_voxels
    assert torch.equal(grid.voxel_size_at(-1), grid.voxel_sizes[2])
    assert torch.equal(grid.origin_at(0), grid.origins[0])
    features = torch.randn(grid.total_voxels, 4, device=device)
    j = grid.jagged_like(features)
    assert j.jdata is features and j.joffsets is grid.joffsets
    with pytest.raises(ValueError, match=rf"jagged_like: data must be a tensor \[{grid.total_voxels},"):
        grid.jagged_like(features[:-1])


@pytest.mark.parametrize("device", DEVICES)
def test_bounding_boxes_match_the_coordinates(device):
    grid, ijk = random_grid(device)
    want = torch.zeros(3, 2, 3, dtype=torch.int32)
    for b, t in enumerate(ijk):
        if len(t):
            want[b, 0], want[b, 1] = t.min(0).values, t.max(0).values
    assert grid.bboxes.device.type == device and grid.bboxes.dtype == torch.int32
    assert torch.equal(grid.bboxes.cpu(), want)
    dual = want.clone()
    dual[[0, 2], 1] += 1  # grid 1 has no voxels: its box stays zeros
    assert torch.equal(grid.dual_bboxes.cpu(), dual)
    assert torch.equal(grid.dual_grid().bboxes[0].cpu(), dual[0])  # the dual grid's own box
    everything = torch.cat(ijk)
    assert torch.equal(grid.total_bbox.cpu(), torch.stack([everything.min(0).values, everything.max(0).values]))
    assert torch.equal(grid.bbox_at(-1).cpu(), want[2]) and torch.equal(grid.dual_bbox_at(0).cpu(), dual[0])
    with pytest.warns(DeprecationWarning, match="bboxes"):
        old = grid.bbox()
    assert old.device.type == "cpu" and torch.equal(old, want)
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32)])).to(device)
    assert empty.total_bbox.tolist() == [[0, 0, 0], [0, 0, 0]] and empty.all_have_zero_voxels


@pytest.mark.parametrize("device", DEVICES)
def test_voxels_along_rays_returns_ijk_by_default(device):
    grid, ijk = random_grid(device, counts=(400, 300))
    # Rays from far away towards random active voxels, so that they cross some.
    targets = [t[torch.randint(0, len(t), (k,))].double() for t, k in zip(ijk, (20, 30))]
    targets = grid.voxel_to_world(tg.JaggedTensor(targets).to(device))
    origins = targets.jagged_like(torch.randn_like(targets.jdata) * 100)
    directions = targets - origins
    voxels, times = grid.voxels_along_rays(origins, directions, max_voxels=100)
    rows, times_rows = grid.voxels_along_rays(origins, directions, max_voxels=100, return_ijk=False,
                                              cumulative=True)
    assert voxels.jdata.dtype == torch.int32 and voxels.jdata.shape[1:] == (3,)
    assert rows.jdata.shape[0] > 20  # the rays do cross voxels
    assert torch.equal(voxels.joffsets, rows.joffsets) and torch.equal(times.jdata, times_rows.jdata)
    assert torch.equal(voxels.jdata, grid.ijk.jdata[rows.jdata])


@pytest.mark.parametrize("device", DEVICES)
def test_from_mesh_takes_fvdb_argument_names_and_default_voxel_size(device):
    vertices = tg.JaggedTensor([torch.rand(30, 3, dtype=torch.float64) * 6]).to(device)
    faces = tg.JaggedTensor([torch.randint(0, 30, (20, 3))]).to(device)
    new = tg.GridBatch.from_mesh(mesh_vertices=vertices, mesh_faces=faces)
    explicit = tg.GridBatch.from_mesh(vertices, faces, voxel_sizes=[1.0] * 3, origins=[0.0] * 3)
    assert new.total_voxels > 0 and torch.equal(new.ijk.jdata, explicit.ijk.jdata)
    assert torch.equal(new.voxel_sizes, explicit.voxel_sizes) and torch.equal(new.origins, explicit.origins)
    with pytest.warns(DeprecationWarning, match="vertices= is now mesh_vertices=, faces= is now mesh_faces="):
        old = tg.GridBatch.from_mesh(vertices=vertices, faces=faces, voxel_sizes=1.0)
    assert torch.equal(old.ijk.jdata, new.ijk.jdata)
    with pytest.raises(TypeError, match="both vertices= and mesh_vertices="):
        tg.GridBatch.from_mesh(mesh_vertices=vertices, vertices=vertices, mesh_faces=faces)


@pytest.mark.parametrize("device", DEVICES)
def test_builders_default_to_unit_voxels_at_the_origin(device):
    points = tg.JaggedTensor([torch.randn(50, 3) * 4, torch.randn(20, 3)]).to(device)
    for build in (tg.GridBatch.from_points, tg.GridBatch.from_nearest_voxels_to_points):
        default = build(points)
        explicit = build(points, voxel_sizes=1.0, origins=0.0)
        assert torch.equal(default.ijk.jdata, explicit.ijk.jdata)
        assert default.voxel_sizes.tolist() == [[1.0] * 3] * 2 and default.origins.tolist() == [[0.0] * 3] * 2
    box = tg.GridBatch.from_dense(2, 3, ijk_min=-1, device=device)
    assert box.total_voxels == 2 * 27 and box.bbox_at(1).tolist() == [[-1, -1, -1], [1, 1, 1]]
    assert tg.GridBatch.from_dense(1, [2, 2, 2]).device.type == "cpu"


@pytest.mark.parametrize("device", DEVICES)
def test_fvdb_argument_names_of_sampling_pooling_and_derived_grids(device):
    grid, _ = random_grid(device)
    data = torch.randn(grid.total_voxels, 2, device=device)
    points = tg.JaggedTensor([torch.randn(n, 3, dtype=torch.float32) * 5 for n in (10, 0, 7)]).to(device)
    sampled = grid.sample_trilinear(points, voxel_data=data)
    with pytest.warns(DeprecationWarning, match="features= is now voxel_data="):
        torch.testing.assert_close(grid.sample_trilinear(points, features=data).jdata, sampled.jdata)
    splat = grid.splat_trilinear(points, points_data=sampled)
    with pytest.warns(DeprecationWarning, match="values= is now points_data="):
        torch.testing.assert_close(grid.splat_trilinear(points, values=sampled).jdata, splat.jdata)
    pooled, coarse = grid.max_pool(2, data)  # stride 0 (fVDB's default): the pool factor
    explicit, _ = grid.max_pool(pool_factor=2, data=data, stride=2)
    assert torch.equal(pooled.jdata, explicit.jdata)
    with pytest.warns(DeprecationWarning, match="kernel_size= is now pool_factor="):
        old, _ = grid.avg_pool(kernel_size=2, data=data)
    torch.testing.assert_close(old.jdata, grid.avg_pool(2, data, stride=0)[0].jdata)
    with pytest.warns(DeprecationWarning, match="factor= is now coarsening_factor="):
        assert grid.coarsened_grid(factor=2).total_voxels == grid.coarsened_grid(coarsening_factor=2).total_voxels
    with pytest.warns(DeprecationWarning, match="n= is now dilation="):
        assert grid.dilated_grid(n=1).total_voxels == grid.dilated_grid(dilation=1).total_voxels


# fVDB's signatures (fvdb-core 0.6's GridBatch) of the spline sampling and region queries.
FVDB_SIGNATURES = {
    "sample_trilinear_with_grad": [("points", None), ("voxel_data", None)],
    "sample_bezier": [("points", None), ("voxel_data", None)],
    "sample_bezier_with_grad": [("points", None), ("voxel_data", None)],
    "splat_bezier": [("points", None), ("points_data", None)],
    "cubes_in_grid": [("cube_centers", None), ("cube_min", 0), ("cube_max", 0)],
    "cubes_intersect_grid": [("cube_centers", None), ("cube_min", 0), ("cube_max", 0)],
    "rays_intersect_voxels": [("ray_origins", None), ("ray_directions", None), ("eps", 0.0)],
}


@pytest.mark.parametrize("name", sorted(FVDB_SIGNATURES))
def test_spline_and_query_methods_have_fvdbs_signatures(name):
    params = list(inspect.signature(getattr(tg.GridBatch, name)).parameters.values())[1:]
    empty = inspect.Parameter.empty
    assert [(p.name, None if p.default is empty else p.default) for p in params] == FVDB_SIGNATURES[name]
