"""Morton and Hilbert codes of a grid's voxels, and tg.nn.SerializedAttention against
attention written here in torch over the same patches."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def cube(n, offset=(0, 0, 0)):
    ax = torch.arange(n)
    ijk = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, 3) + torch.tensor(offset)
    return ijk.to(torch.int32)


def test_morton_interleaves_bits_from_each_grids_corner():
    ijk = torch.tensor([[5, 7, 9], [6, 7, 9], [5, 8, 9], [5, 7, 10], [8, 10, 12]], dtype=torch.int32)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk, ijk + 100]), voxel_sizes=[[1.0] * 3] * 2,
                                 origins=[[0.0] * 3] * 2)
    codes = grid.morton()
    local = grid.ijk.jdata.long() - torch.tensor([5, 7, 9]) - 100 * grid.ijk.jidx.long()[:, None]
    want = torch.zeros(local.shape[0], dtype=torch.int64)
    for b in range(21):
        for a in range(3):
            want |= ((local[:, a] >> b) & 1) << (3 * b + 2 - a)
    assert torch.equal(codes.jdata, want)
    assert torch.equal(codes.jdata[:5].sort().values, codes.jdata[5:].sort().values)  # same shape, both grids


def test_hilbert_walks_a_full_cube_one_step_at_a_time():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([cube(8, (-3, 4, 2))]), voxel_sizes=[[1.0] * 3],
                                 origins=[[0.0] * 3])
    codes = grid.hilbert().jdata
    assert sorted(codes.tolist()) == list(range(512))  # the curve's first 512 cells: this cube
    path = grid.ijk.jdata.long()[torch.argsort(codes)]
    steps = (path[1:] - path[:-1]).abs().sum(1)
    assert (steps == 1).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("order", ["morton", "hilbert"])
def test_serialized_attention_matches_attention_over_the_same_patches(device, order):
    ijk = [torch.unique(torch.randint(-8, 8, (400, 3), dtype=torch.int32), dim=0) for _ in range(2)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[[1.0] * 3] * 2, origins=[[0.0] * 3] * 2)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    attn = tg.nn.SerializedAttention(32, num_heads=2, patch_size=48, order=order).to(device, dtype)
    x = torch.randn(grid.total_voxels, 32, dtype=dtype, device=device, requires_grad=True)
    g = grid.to(device)
    y = attn(x, g)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # The reference: the same projections, softmax attention per patch in float64.
    with torch.no_grad():
        perm, cu, _ = tg.nn.serialized_attention.serialized_patches(g, order, 48)
        qkv = attn.qkv(x)[perm].double().view(-1, 3, 2, 16)
        core = torch.empty(x.shape[0], 2, 16, dtype=torch.float64, device=device)
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            q, k, v = (qkv[a:b, i].transpose(0, 1) for i in range(3))
            w = torch.softmax(q @ k.transpose(1, 2) / 4.0, -1)
            core[a:b] = (w @ v).transpose(0, 1)
        unsorted = torch.empty_like(core)
        unsorted[perm] = core
        want = attn.proj(unsorted.reshape(-1, 32).to(dtype)).double()
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert ((y.double() - want).norm() / want.norm()).item() < tol
    # Patches stay inside one grid and hold patch_size voxels but the grids' last ones.
    lengths = cu.diff().tolist()
    assert sum(lengths) == grid.total_voxels and max(lengths) == 48
    # The patches are kept for the same grid and made anew for another.
    kept = attn.patches(g)
    assert attn.patches(g)[0] is kept[0]
    other = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk[0]]), voxel_sizes=[[1.0] * 3]).to(device)
    assert attn.patches(other)[0].shape[0] == other.total_voxels
    torch.testing.assert_close(attn(x, g), y)


def test_bad_configurations():
    with pytest.raises(ValueError, match="multiple of num_heads"):
        tg.nn.SerializedAttention(30, num_heads=4)
    with pytest.raises(ValueError, match="order"):
        tg.nn.SerializedAttention(32, num_heads=4, order="raster")
