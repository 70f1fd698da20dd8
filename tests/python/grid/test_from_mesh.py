import math

import pytest
import torch

import tilegrid as tg


def sample_triangles(vertices, faces, n=20000):
    """Points spread over every triangle (random barycentric coordinates plus the corners)."""
    a, b, c = (vertices[faces[:, i]] for i in range(3))
    r1, r2 = torch.rand(n, faces.shape[0], 1, dtype=torch.float64), torch.rand(n, faces.shape[0], 1, dtype=torch.float64)
    s = r1.sqrt()
    pts = (1 - s) * a + s * (1 - r2) * b + s * r2 * c
    return torch.cat([pts.reshape(-1, 3), a, b, c])


def test_mesh_voxels_cover_the_surface_and_nothing_far_from_it():
    vertices = [
        torch.tensor([[0.1, 0.2, 0.3], [3.7, 0.9, 1.1], [1.2, 4.1, 2.6]], dtype=torch.float64),
        torch.tensor([[0, 0, 0], [2, 0, 0], [0, 2, 0], [0, 0, 2]], dtype=torch.float64) * 1.3 + 0.05,
    ]
    faces = [torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])]
    voxel = 0.5
    grid = tg.GridBatch.from_mesh(tg.JaggedTensor(vertices), tg.JaggedTensor(faces), voxel_sizes=[voxel] * 3)
    for b in range(2):
        samples = sample_triangles(vertices[b], faces[b])
        inside = grid.points_in_grid(tg.JaggedTensor([samples if i == b else torch.zeros(0, 3, dtype=torch.float64) for i in range(2)]))
        assert inside[b].all(), "a point of the surface lies in a voxel the grid lacks"
        # A voxel whose cube meets the surface has its centre within half a diagonal of it.
        centres = grid.voxel_to_world(grid.ijk)[b]
        nearest = torch.cdist(centres, samples).min(1).values
        assert (nearest <= voxel * math.sqrt(3) / 2 + 0.05).all()  # margin: sample spacing


def test_bad_faces():
    v = tg.JaggedTensor([torch.zeros(3, 3)])
    with pytest.raises(ValueError, match="names vertex 5 but the mesh has 3"):
        tg.GridBatch.from_mesh(v, tg.JaggedTensor([torch.tensor([[0, 1, 5]])]), voxel_sizes=[1, 1, 1])
