"""GridBatch.marching_cubes on analytic fields (sphere, torus): the meshes are closed (every
edge used once in each direction), of the right genus, on the surface, with outward normals
and positive volume; on sparse random grids the meshes are still manifold; a batch's meshes
index their own vertices; scikit-image's marching cubes finds the same vertices where it is
installed; the GPU's mesh is the CPU's."""

import math

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES, requires_cuda


def dense_grid(r, voxel=0.5, offset=(0.0, 0.0, 0.0)):
    ax = torch.arange(-r, r + 1)
    ijk = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, 3).to(torch.int32)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]), voxel_sizes=[[voxel] * 3], origins=[list(offset)])
    return grid, grid.voxel_to_world(grid.ijk).jdata


def directed_edges(faces):
    e = torch.cat([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    return [tuple(x) for x in e.tolist()]


def assert_closed(faces):
    edges = directed_edges(faces)
    assert len(set(edges)) == len(edges), "an edge is used twice in one direction"
    s = set(edges)
    assert all((b, a) in s for a, b in s), "an edge is not shared by two faces"


def euler(vertices, faces):
    edges = {tuple(sorted(e)) for e in directed_edges(faces)}
    return vertices.shape[0] - len(edges) + faces.shape[0]


@pytest.mark.parametrize("device", DEVICES)
def test_sphere(device):
    grid, centres = dense_grid(10)
    field = centres.norm(dim=1) - 3.0
    v, f, n = grid.to(device).marching_cubes(field.to(device))
    V, F, N = v.jdata.cpu(), f.jdata.cpu(), n.jdata.cpu()
    assert_closed(F)
    assert euler(V, F) == 2
    assert (V.norm(dim=1) - 3.0).abs().max() < 0.02  # linear interpolation of |x| along edges
    a, b, c = V[F[:, 0]], V[F[:, 1]], V[F[:, 2]]
    volume = (a * torch.linalg.cross(b, c)).sum() / 6
    assert abs(volume - 4 / 3 * math.pi * 27) < 0.03 * 4 / 3 * math.pi * 27
    assert ((torch.nn.functional.normalize(V, dim=1) * N).sum(1) > 0.98).all()
    face_normal = torch.linalg.cross(b - a, c - a)
    assert ((face_normal * (a + b + c)).sum(1) >= 0).all()  # outward (0: degenerate faces at a level-valued centre)


def test_torus_has_genus_one_and_levels_shift_the_surface():
    grid, centres = dense_grid(14, voxel=0.25)
    x, y, z = centres.unbind(1)
    field = torch.sqrt((torch.sqrt(x * x + y * y) - 2.0) ** 2 + z * z) - 0.7
    v, f, _ = grid.marching_cubes(field)
    assert_closed(f.jdata)
    assert euler(v.jdata, f.jdata) == 0
    v2, _, _ = grid.marching_cubes(field, level=0.2)
    P = v2.jdata
    tube = torch.sqrt((torch.sqrt(P[:, 0] ** 2 + P[:, 1] ** 2) - 2.0) ** 2 + P[:, 2] ** 2)
    assert (tube - 0.9).abs().max() < 0.02


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_random_grids_give_manifold_meshes_per_grid(device):
    ijk = [torch.unique(torch.randint(-6, 6, (3000, 3), dtype=torch.int32), dim=0) for _ in range(2)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[[1.0] * 3, [0.5] * 3],
                                 origins=[[0.0] * 3, [1.0, 2.0, 3.0]]).to(device)
    field = torch.randn(grid.total_voxels, dtype=torch.float64, device=device)
    v, f, n = grid.marching_cubes(field)
    assert v.joffsets.shape[0] == 3 and f.joffsets.shape[0] == 3
    for b in range(2):
        Vb, Fb = v[b].cpu(), f[b].cpu()
        assert Fb.numel() > 0 and int(Fb.min()) >= 0 and int(Fb.max()) < Vb.shape[0]
        edges = directed_edges(Fb)
        assert len(set(edges)) == len(edges)  # manifold: no edge twice in one direction
    assert torch.allclose(n.jdata.norm(dim=1).cpu(), torch.ones(n.jdata.shape[0], dtype=torch.float64))


def test_matches_scikit_image_vertices():
    measure = pytest.importorskip("skimage.measure")
    grid, centres = dense_grid(8, voxel=1.0)
    field = (centres ** 2 * torch.tensor([1.0, 0.5, 0.25]).double()).sum(1).sqrt() - 4.2
    v, _, _ = grid.marching_cubes(field)
    ijk = grid.ijk.jdata.long() + 8  # a dense array in ijk order (the grid's rows are not)
    dense = torch.full((17, 17, 17), float("nan"), dtype=torch.float64)
    dense[ijk[:, 0], ijk[:, 1], ijk[:, 2]] = field
    verts, _, _, _ = measure.marching_cubes(dense.numpy(), level=0.0)
    def rows_sorted(x):  # lexicographic order of the rows
        return torch.tensor(sorted(x.round(decimals=6).tolist()), dtype=torch.float64)
    ours = rows_sorted(v.jdata + 8)
    theirs = rows_sorted(torch.from_numpy(verts.copy()).double())
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_bad_inputs():
    grid, centres = dense_grid(3)
    with pytest.raises(ValueError, match="field"):
        grid.marching_cubes(torch.zeros(grid.total_voxels + 1, dtype=torch.float64))
    with pytest.raises(TypeError, match="field must be"):
        grid.marching_cubes(torch.zeros(grid.total_voxels, dtype=torch.int32))
    with pytest.raises(ValueError, match="level must be finite"):
        grid.marching_cubes(centres[:, 0], level=float("nan"))


@pytest.mark.gpu
@requires_cuda
def test_gpu_mesh_is_the_cpu_mesh():
    grid, centres = dense_grid(12, voxel=0.3)
    field = (centres.norm(dim=1) - 2.0 + 0.3 * torch.sin(3 * centres[:, 0])).float()
    cpu = grid.marching_cubes(field)
    gpu = grid.to("cuda").marching_cubes(field.cuda())
    for a, b in zip(cpu, gpu):
        assert torch.equal(a.joffsets, b.joffsets.cpu()) and torch.equal(a.jdata, b.jdata.cpu())
