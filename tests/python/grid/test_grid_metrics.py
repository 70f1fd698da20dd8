"""voxel_iou and voxel_chamfer_distance against brute-force references on random grids: set
arithmetic on the voxel sets, and float64 distance matrices."""

import math

import pytest
import torch

import tilegrid as tg
import tilegrid.grid.metrics as grid_metrics
from conftest import DEVICES


def ijk_of(grid) -> tg.JaggedTensor:
    return grid_metrics._ijk(grid)


def random_grid(device, sizes=(300, 0, 120), spread=12, voxel_sizes=(0.1, 0.2, 0.3),
                origins=(1.0, -2.0, 0.5)):
    """A batch of one grid per entry of sizes (that many random coordinates, duplicates merged)."""
    ijk = [torch.randint(-spread, spread, (n, 3), dtype=torch.int32) for n in sizes]
    return tg.GridBatch.from_ijk(tg.JaggedTensor(ijk).to(device), voxel_sizes=list(voxel_sizes),
                                 origins=list(origins))


def voxel_sets(grid) -> list[set]:
    return [set(map(tuple, t.cpu().tolist())) for t in ijk_of(grid).unbind()]


@pytest.mark.parametrize("device", DEVICES)
def test_voxel_iou_is_the_set_intersection_over_the_union(device):
    a = random_grid(device, sizes=(400, 0, 50, 0))
    # b: a random part of a and fresh voxels, so that the intersection is neither empty nor all.
    keep = torch.rand(a.total_voxels, device=device) < 0.6
    extra = [torch.randint(-12, 12, (n, 3), dtype=torch.int32) for n in (200, 30, 0, 0)]
    parts = [torch.cat([t[k], e.to(device)]) for t, k, e in
             zip(ijk_of(a).unbind(), torch.split(keep, torch.diff(a.voxel_offsets).tolist()), extra)]
    b = tg.GridBatch.from_ijk(tg.JaggedTensor(parts), voxel_sizes=a.voxel_sizes.tolist(),
                              origins=a.origins.tolist())
    got = tg.voxel_iou(a, b)
    assert got.dtype == torch.float64 and got.device == a.device
    want = [len(sa & sb) / len(sa | sb) if sa | sb else 1.0 for sa, sb in zip(voxel_sets(a), voxel_sets(b))]
    assert want[1] == 0.0 and want[3] == 1.0  # only b's grid 1 has voxels; neither grid 3 has
    torch.testing.assert_close(got.cpu(), torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)
    torch.testing.assert_close(tg.voxel_iou(a, a).cpu(), torch.ones(4, dtype=torch.float64))


def test_voxel_scores_refuse_grids_in_different_spaces():
    a = random_grid("cpu", sizes=(10, 10))
    shifted = random_grid("cpu", sizes=(10, 10), origins=(1.0, -2.0, 0.6))
    with pytest.raises(ValueError, match=r"voxel_iou: a and b must share voxel sizes and origins"):
        tg.voxel_iou(a, shifted)
    with pytest.raises(ValueError, match=r"voxel_chamfer_distance: a has 2 grids but b has 1"):
        tg.voxel_chamfer_distance(a, random_grid("cpu", sizes=(10,)))
    with pytest.raises(ValueError, match=r"max_queries must be None or an int >= 1, got 0"):
        tg.voxel_chamfer_distance(a, a, max_queries=0)
    with pytest.raises(TypeError, match=r"voxel_iou: b must be a GridBatch, got Tensor"):
        tg.voxel_iou(a, torch.zeros(3))


def chamfer_reference(a, b, picks=None) -> list[float]:
    """float64 brute force: every distance between the two grids' voxel centres, from ijk."""
    out = []
    for g, (ia, ib) in enumerate(zip(ijk_of(a).unbind(), ijk_of(b).unbind())):
        pa = a.origins[g] + a.voxel_sizes[g] * ia.cpu().double()
        pb = b.origins[g] + b.voxel_sizes[g] * ib.cpu().double()
        if len(pa) == 0 or len(pb) == 0:
            out.append(0.0 if len(pa) == len(pb) else math.inf)
            continue
        d = (pa[:, None, :] - pb[None, :, :]).square().sum(-1).sqrt()
        qa, qb = (slice(None), slice(None)) if picks is None else picks[g]
        out.append(float(d.amin(1)[qa].mean() + d.amin(0)[qb].mean()) / 2)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block", [None, 50])
def test_voxel_chamfer_distance_matches_a_float64_distance_matrix(device, block, monkeypatch):
    if block is not None:  # a few queries a torch.cdist call: the blocked loop's edges
        monkeypatch.setattr(grid_metrics, "_CDIST_BLOCK", block)
    a = random_grid(device, sizes=(300, 0, 80, 5))
    b = random_grid(device, sizes=(250, 0, 0, 90))
    got = tg.voxel_chamfer_distance(a, b)
    assert got.dtype == torch.float64 and got.device == a.device
    want = torch.tensor(chamfer_reference(a, b), dtype=torch.float64)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-12, atol=1e-12)
    assert got[1] == 0 and math.isinf(got[2])
    torch.testing.assert_close(tg.voxel_chamfer_distance(a, a).cpu(), torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize("device", DEVICES)
def test_voxel_chamfer_distance_with_max_queries_averages_the_generators_picks(device):
    a = random_grid(device, sizes=(300, 40))
    b = random_grid(device, sizes=(250, 60))
    seed, k = int(torch.randint(0, 2**31, ())), 50
    got = tg.voxel_chamfer_distance(a, b, max_queries=k, generator=torch.Generator().manual_seed(seed))
    # The picks in the order they are drawn: a's queries, then b's, grid by grid; a grid of at
    # most k voxels draws none and uses them all.
    g = torch.Generator().manual_seed(seed)
    picks = []
    for na, nb in zip(torch.diff(a.voxel_offsets).tolist(), torch.diff(b.voxel_offsets).tolist()):
        qa = torch.randperm(na, generator=g)[:k] if na > k else slice(None)
        qb = torch.randperm(nb, generator=g)[:k] if nb > k else slice(None)
        picks.append((qa, qb))
    want = torch.tensor(chamfer_reference(a, b, picks), dtype=torch.float64)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-12, atol=1e-12)
    exact = tg.voxel_chamfer_distance(a, b, max_queries=10**6)
    torch.testing.assert_close(exact.cpu(), torch.tensor(chamfer_reference(a, b), dtype=torch.float64),
                               rtol=1e-12, atol=1e-12)
