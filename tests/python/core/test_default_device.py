"""The library's own host-side tensors name their device, so that a user's
torch.set_default_device("cuda") does not move them beside the inputs: each call here runs on
CPU tensors under another default device ("meta" stands in for a GPU; any tensor the library
made on the default device without saying so fails there, as a CUDA one would beside CPU
inputs). tg.nn modules are left out: their parameters follow the default device, as torch's
modules' do."""
import os
import tempfile

import pytest
import torch

import tilegrid as tg


def _cpu(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, device="cpu")


def _grid(n=4):
    return tg.GridBatch.from_dense(1, [n, n, n], device="cpu")


def _attention():
    q, k, v = _cpu(2, 8, 2, 16), _cpu(2, 8, 2, 16), _cpu(2, 8, 2, 16)
    tg.flash_attn_func(q, k, v, causal=True)
    tg.flash_attn_func(q, k, v, window_size=(2, 1))
    cu = torch.tensor([0, 5, 16], dtype=torch.int32, device="cpu")
    flat = [t.reshape(16, 2, 16) for t in (q, k, v)]
    tg.flash_attn_varlen_func(*flat, cu, cu, 11, 11, causal=True)


def _kvcache():
    q, k, v = _cpu(2, 1, 2, 16), _cpu(2, 8, 2, 16), _cpu(2, 8, 2, 16)
    lengths = torch.tensor([3, 5], dtype=torch.int32, device="cpu")
    tg.flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, k=_cpu(2, 1, 2, 16), v=_cpu(2, 1, 2, 16))
    tg.flash_attn_with_kvcache(q, k, v, cache_seqlens=6, num_splits=2)
    pages = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device="cpu")
    tg.flash_attn_with_kvcache(q, _cpu(4, 4, 2, 16), _cpu(4, 4, 2, 16), cache_seqlens=6, block_table=pages)


def _fusion():
    tg.rms_norm(_cpu(4, 8), _cpu(8))
    tg.cross_entropy(_cpu(4, 5), torch.tensor([0, 1, 2, 3], device="cpu"))
    tg.linear_cross_entropy(_cpu(4, 8, dtype=torch.bfloat16), _cpu(16, 8, dtype=torch.bfloat16),
                            torch.tensor([0, 1, 2, 3], device="cpu"))


def _derived_grids():
    g = _grid(3)
    g.coarsened_grid(2), g.refined_grid(2), g.dual_grid(), g.dilated_grid(1)
    g.voxel_to_world_matrices, g.world_to_voxel_matrices


def _points_and_sampling():
    g = tg.GridBatch.from_points(tg.JaggedTensor([torch.rand(20, 3, device="cpu")]), voxel_sizes=0.1)
    g.sample_trilinear(tg.JaggedTensor([torch.rand(5, 3, device="cpu")]), _cpu(g.total_voxels, 2))


def _pooling():
    g = _grid()
    g.max_pool(2, _cpu(g.total_voxels, 3))


def _rays():
    g = _grid()
    origins = tg.JaggedTensor([torch.full((3, 3), -1.0, device="cpu")])
    directions = tg.JaggedTensor([torch.ones(3, 3, device="cpu")])
    g.voxels_along_rays(origins, directions, 8)


def _jagged():
    j = tg.JaggedTensor([_cpu(3, 2), _cpu(4, 2)])
    j.jsum(), j.jmax(), j.jidx, j.unbind(), tg.jcat([j, j])


def _mesh():
    path = os.path.join(tempfile.mkdtemp(), "triangle.off")
    with open(path, "w") as f:
        f.write("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    tg.read_mesh(path)


@pytest.mark.parametrize("calls", [_attention, _kvcache, _fusion, _derived_grids, _points_and_sampling,
                                   _pooling, _rays, _jagged, _mesh], ids=lambda f: f.__name__.strip("_"))
def test_cpu_calls_run_under_another_default_device(calls):
    torch.set_default_device("meta")
    try:
        calls()
    finally:
        torch.set_default_device(None)
