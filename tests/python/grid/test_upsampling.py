"""tg.nn.UpsamplingNearest and GridBatch.refine (fVDB's names and arguments): each fine voxel
takes its coarse parent's features, checked against a loop over the fine voxels' parents in a
dictionary of the coarse voxels, with masks, non-uniform factors and a given fine grid."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def coarse_grid(device):
    ijk = [torch.unique(torch.randint(-6, 6, (n, 3), dtype=torch.int32), dim=0) for n in (80, 40)]
    return tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[[1.0, 2.0, 0.5], [1, 1, 1]],
                                 origins=[[0.5, 0, -1], [3, 2, 1]]).to(device)


def rows_of(grid) -> dict:
    return {(b, *c): r for r, (b, c) in enumerate(zip(grid.jidx.cpu().tolist(), grid.ijk.jdata.cpu().tolist()))}


def parent_rows(coarse, fine, factor) -> list:
    """For each fine voxel, its coarse parent's row (floor(ijk / factor)) or None."""
    rows = rows_of(coarse)
    return [rows.get((b, *(c[a] // factor[a] for a in range(3))))
            for (b, *c) in rows_of(fine)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("factor", [2, (1, 2, 3)])
def test_upsampling_copies_each_parent_to_its_children(device, factor):
    coarse = coarse_grid(device)
    f = (factor,) * 3 if isinstance(factor, int) else factor
    data = torch.randn(coarse.total_voxels, 5, dtype=torch.float64, device=device, requires_grad=True)
    up = tg.nn.UpsamplingNearest(factor)
    assert up.scale_factor == f
    fine_data, fine = up(coarse.jagged_like(data), coarse)
    assert fine.total_voxels == coarse.total_voxels * f[0] * f[1] * f[2]
    assert torch.equal(fine.ijk.jdata, coarse.refined_grid(factor).ijk.jdata)
    assert torch.equal(fine_data.joffsets, fine.joffsets)
    parents = parent_rows(coarse, fine, f)
    assert None not in parents
    torch.testing.assert_close(fine_data.jdata, data[parents], rtol=0, atol=0)
    weights = torch.randn_like(fine_data.jdata)
    (fine_data.jdata * weights).sum().backward()
    grad = torch.zeros(coarse.total_voxels, 5, dtype=torch.float64)
    for v, p in enumerate(parents):
        grad[p] += weights[v].cpu()
    torch.testing.assert_close(data.grad.cpu(), grad)


@pytest.mark.parametrize("device", DEVICES)
def test_a_mask_splits_only_its_voxels_and_a_given_fine_grid_is_kept(device):
    coarse = coarse_grid(device)
    data = torch.randn(coarse.total_voxels, 2, device=device)
    mask = torch.rand(coarse.total_voxels, device=device) < 0.5
    fine_data, fine = tg.nn.UpsamplingNearest(2)(data, coarse, mask)
    kept = set(rows_of(coarse.pruned_grid(mask)))
    assert {(b, *(x // 2 for x in c)) for (b, *c) in rows_of(fine)} == kept
    torch.testing.assert_close(fine_data.jdata, data[parent_rows(coarse, fine, (2, 2, 2))])
    # A given fine grid (here a dilated one, whose border voxels have no parent) is used as is.
    given = coarse.refined_grid(2).dilated_grid(1)
    out, same = coarse.refine(2, data, fine_grid=given)
    assert same is given
    parents = parent_rows(coarse, given, (2, 2, 2))
    want = torch.stack([data[p] if p is not None else torch.zeros(2, device=device) for p in parents])
    assert None in parents
    torch.testing.assert_close(out.jdata, want, rtol=0, atol=0)


def test_refined_grid_takes_fvdb_argument_names():
    coarse = coarse_grid("cpu")
    with pytest.warns(DeprecationWarning, match="factor= is now subdiv_factor="):
        old = coarse.refined_grid(factor=2)
    assert torch.equal(old.ijk.jdata, coarse.refined_grid(subdiv_factor=2).ijk.jdata)
