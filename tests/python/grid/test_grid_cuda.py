"""GridBatch on a GPU: every CUDA query must agree with the CPU path on fresh random data."""

import pytest
import torch

import tilegrid as tg
from conftest import requires_cuda

pytestmark = [pytest.mark.gpu, requires_cuda]


def random_batch():
    sizes = [3000, 0, 500, 1]
    ijk = tg.JaggedTensor([torch.randint(-(1 << 20), 1 << 20, (n, 3), dtype=torch.int32) // 97 for n in sizes])
    return tg.GridBatch.from_ijk(ijk, voxel_sizes=[0.3, 0.2, 0.1], origins=[1.0, -1.0, 0.5])


def test_to_cuda_and_back_keeps_the_grid():
    grid = random_batch()
    gpu = grid.cuda()
    assert gpu.device.type == "cuda" and gpu.total_voxels == grid.total_voxels
    assert torch.equal(gpu.cpu().ijk.jdata, grid.ijk.jdata)


def test_ijk_and_lookups_match_the_cpu():
    grid = random_batch()
    gpu = grid.cuda()
    assert torch.equal(gpu.ijk.jdata.cpu(), grid.ijk.jdata)
    active = grid.ijk
    queries = tg.JaggedTensor([torch.cat([t, t ^ 1]) for t in active.unbind()])
    want = grid.ijk_to_index(queries).jdata
    got = gpu.ijk_to_index(queries.to("cuda")).jdata
    assert torch.equal(got.cpu(), want)
    assert (want >= 0).any() and (want < 0).any()


@pytest.mark.parametrize("dtype,channels", [(torch.float32, 5), (torch.float64, 5), (torch.float32, 8), (torch.float32, 36)])
def test_sampling_and_splatting_match_the_cpu(dtype, channels):
    """5 channels take the one-thread-a-point kernels; float32 with a multiple of 4 channels
    takes the grouped float4 kernels (36 = 9 groups: more groups than lanes)."""
    grid = tg.GridBatch.from_nearest_voxels_to_points(
        tg.JaggedTensor([torch.rand(400, 3, dtype=torch.float64) * 3 for _ in range(2)]), voxel_sizes=[0.25] * 3
    )
    gpu = grid.cuda()
    pts = tg.JaggedTensor([torch.rand(300, 3, dtype=dtype) * 3 for _ in range(2)])
    feats = torch.randn(grid.total_voxels, channels, dtype=dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)

    p_cpu = pts.jdata.clone().requires_grad_()
    f_cpu = feats.clone().requires_grad_()
    out_cpu = grid.sample_trilinear(tg.JaggedTensor.from_data_and_offsets(p_cpu, pts.joffsets), f_cpu).jdata
    out_cpu.pow(2).sum().backward()

    p_gpu = pts.jdata.cuda().requires_grad_()
    f_gpu = feats.cuda().requires_grad_()
    out_gpu = gpu.sample_trilinear(tg.JaggedTensor.from_data_and_offsets(p_gpu, pts.joffsets.cuda()), f_gpu).jdata
    out_gpu.pow(2).sum().backward()

    torch.testing.assert_close(out_gpu.cpu(), out_cpu.detach(), **tol)
    torch.testing.assert_close(f_gpu.grad.cpu(), f_cpu.grad, **tol)
    torch.testing.assert_close(p_gpu.grad.cpu(), p_cpu.grad, **tol)

    values = torch.randn(600, channels, dtype=dtype)
    splat_cpu = grid.splat_trilinear(pts, values).jdata
    splat_gpu = gpu.splat_trilinear(pts.to("cuda"), values.cuda()).jdata
    torch.testing.assert_close(splat_gpu.cpu(), splat_cpu, **tol)


def test_points_on_another_device_are_rejected():
    gpu = random_batch().cuda()
    with pytest.raises(ValueError, match="ijk is on cpu but the grid is on cuda:0"):
        gpu.ijk_to_index(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)] * 4))


@pytest.mark.parametrize("grids,points,spread", [(4, 3000, 1 << 20), (1, 20000, 40), (64, 100, 300)])
def test_gpu_construction_matches_the_cpu(grids, points, spread):
    sizes = [points if b != 1 else 0 for b in range(grids)]  # an empty grid when grids > 1
    parts = [torch.randint(-spread, spread, (n, 3), dtype=torch.int32) for n in sizes]
    parts = [torch.cat([p, p[: len(p) // 2]]) for p in parts]  # duplicates
    cpu = tg.GridBatch.from_ijk(tg.JaggedTensor(parts))
    gpu = tg.GridBatch.from_ijk(tg.JaggedTensor([p.cuda() for p in parts]))
    assert gpu.device.type == "cuda"
    assert gpu.total_voxels == cpu.total_voxels
    assert [gpu.num_voxels_at(b) for b in range(grids)] == [cpu.num_voxels_at(b) for b in range(grids)]
    assert (gpu._impl.num_upper_nodes, gpu._impl.num_lower_nodes, gpu._impl.num_leaves) == (
        cpu._impl.num_upper_nodes, cpu._impl.num_lower_nodes, cpu._impl.num_leaves)
    assert torch.equal(gpu.ijk.jdata.cpu(), cpu.ijk.jdata)
    queries = tg.JaggedTensor([torch.cat([p, p ^ 1]) for p in parts])
    assert torch.equal(gpu.ijk_to_index(queries.to("cuda")).jdata.cpu(), cpu.ijk_to_index(queries).jdata)
    assert torch.equal(gpu.voxel_offsets.cpu(), cpu.voxel_offsets)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpu_construction_from_points_matches_the_cpu(dtype):
    pts = tg.JaggedTensor([torch.randn(5000, 3, dtype=dtype) * 7, torch.randn(300, 3, dtype=dtype)])
    args = dict(voxel_sizes=[[0.3, 0.3, 0.3], [0.05, 0.1, 0.2]], origins=[[0.1, 0, 0], [0, 0, 0]])
    for build in (tg.GridBatch.from_points, tg.GridBatch.from_nearest_voxels_to_points):
        cpu = build(pts, **args)
        gpu = build(pts.to("cuda"), **args)
        assert gpu.device.type == "cuda"
        assert torch.equal(gpu.ijk.jdata.cpu(), cpu.ijk.jdata)


def test_gpu_derived_grids_match_the_cpu():
    grid = random_batch()
    gpu = grid.cuda()
    for derive in (lambda g: g.coarsened_grid(2), lambda g: g.dual_grid(), lambda g: g.dilated_grid(1)):
        assert torch.equal(derive(gpu).ijk.jdata.cpu(), derive(grid).ijk.jdata)


def test_bad_points_on_the_gpu_are_named_as_on_the_cpu():
    good = torch.zeros(4, 3, device="cuda")
    nan = torch.tensor([[0.0, 0, 0], [0.0, float("nan"), 0.0]], device="cuda")
    with pytest.raises(ValueError, match="points must be finite, got nan at point 5"):
        tg.GridBatch.from_points(tg.JaggedTensor([good, nan]), voxel_sizes=[1, 1, 1])
    far = torch.tensor([[0.0, 0, 0], [0.0, 3e9, 0]], device="cuda")
    with pytest.raises(ValueError, match=r"a point maps to voxel coordinate 3e\+09, outside the int32 range"):
        tg.GridBatch.from_points(tg.JaggedTensor([far]), voxel_sizes=[1, 1, 1])


def random_mesh(num_vertices, num_faces, scale, dtype):
    """A random triangle soup: vertices spread over a box, faces naming random vertices."""
    vertices = (torch.rand(num_vertices, 3, dtype=torch.float64) * scale - scale / 3).to(dtype)
    faces = torch.randint(0, num_vertices, (num_faces, 3), dtype=torch.int64)
    return vertices, faces


@pytest.mark.parametrize("dtype,index_dtype", [(torch.float32, torch.int32), (torch.float64, torch.int64)])
def test_gpu_construction_from_mesh_matches_the_cpu(dtype, index_dtype):
    meshes = [random_mesh(50, 200, 6.0, dtype), random_mesh(3, 0, 1.0, dtype), random_mesh(400, 30, 20.0, dtype)]
    vertices = tg.JaggedTensor([v for v, _ in meshes])
    faces = tg.JaggedTensor([f.to(index_dtype) for _, f in meshes])
    args = dict(voxel_sizes=[[0.1, 0.1, 0.1], [1, 1, 1], [0.5, 0.25, 1.0]], origins=[[0.05, 0, 0], [0, 0, 0], [1, 2, 3]])
    cpu = tg.GridBatch.from_mesh(vertices, faces, **args)
    gpu = tg.GridBatch.from_mesh(vertices.to("cuda"), faces.to("cuda"), **args)
    assert gpu.device.type == "cuda" and cpu.total_voxels > 1000
    assert [gpu.num_voxels_at(b) for b in range(3)] == [cpu.num_voxels_at(b) for b in range(3)]
    assert torch.equal(gpu.ijk.jdata.cpu(), cpu.ijk.jdata)


def test_gpu_from_mesh_names_the_bad_face_and_vertex_as_the_cpu_does():
    v = tg.JaggedTensor([torch.eye(3, device="cuda"), torch.eye(3, device="cuda")])
    faces = tg.JaggedTensor([torch.tensor([[0, 1, 2]], device="cuda"), torch.tensor([[0, 1, 2], [0, 1, 5]], device="cuda")])
    with pytest.raises(ValueError, match="face 1 of mesh 1 names vertex 5 but the mesh has 3"):
        tg.GridBatch.from_mesh(v, faces, voxel_sizes=[1, 1, 1])
    nan = tg.JaggedTensor([torch.tensor([[0.0, 0, 0], [1, float("nan"), 0], [0, 1, 0]], device="cuda")])
    with pytest.raises(ValueError, match="vertices must be finite; face 0 of mesh 0 has a NaN or infinite vertex"):
        tg.GridBatch.from_mesh(nan, tg.JaggedTensor([torch.tensor([[0, 1, 2]], device="cuda")]), voxel_sizes=[1, 1, 1])


def test_gpu_from_dense_matches_the_cpu():
    args = dict(ijk_min=(-3, 5, 0), voxel_sizes=[0.5, 0.5, 0.5], origins=[1.0, 2.0, 3.0])
    cpu = tg.GridBatch.from_dense(2, (7, 1, 9), **args)
    gpu = tg.GridBatch.from_dense(2, (7, 1, 9), device="cuda", **args)
    assert gpu.device.type == "cuda"
    assert torch.equal(gpu.ijk.jdata.cpu(), cpu.ijk.jdata)
    assert torch.equal(gpu.voxel_sizes, cpu.voxel_sizes) and torch.equal(gpu.origins, cpu.origins)
