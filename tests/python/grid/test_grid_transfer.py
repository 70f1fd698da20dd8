"""Features between grids, points, coordinates and dense volumes (grid/transfer.py, fVDB's
names): sample_nearest, neighbor_indexes, inject_from / inject_to / inject_from_ijk, the dense
injections, merged_grid, clip / clipped_grid and from_dense with a mask, each against a
brute-force reference written here (Python loops over a dictionary of the active voxels) on
random grids, on the CPU and, where there is one, the GPU; gradients against the reference's
own adjoint."""

import itertools
import math

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def random_grid(device, counts=(300, 120), spread=8, sizes=((0.5, 0.25, 1.0), (2.0, 2.0, 2.0))):
    ijk = [torch.unique(torch.randint(-spread, spread, (n, 3), dtype=torch.int32), dim=0) for n in counts]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[list(s) for s in sizes[:len(counts)]],
                                 origins=(torch.randn(len(counts), 3)).tolist())
    return grid.to(device)


def voxel_rows(grid) -> dict:
    """{(grid, i, j, k): row in the batch} of every active voxel: the reference's lookup."""
    ijk, jidx = grid.ijk.jdata.cpu().tolist(), grid.jidx.cpu().tolist()
    return {(b, *c): r for r, (b, c) in enumerate(zip(jidx, ijk))}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sample_nearest_picks_the_nearest_active_corner(device, dtype):
    grid = random_grid(device)
    rows = voxel_rows(grid)
    # Points near active voxels (up to a voxel away) and a few far from every voxel.
    centres = grid.voxel_to_world(grid.ijk).jdata.cpu()
    counts = [200, 150]
    parts = []
    for b, n in enumerate(counts):
        mine = centres[grid.joffsets[b]:grid.joffsets[b + 1]]
        pick = mine[torch.randint(0, len(mine), (n,))]
        jitter = (torch.rand(n, 3, dtype=torch.float64) * 2 - 1) * grid.voxel_sizes[b]
        parts.append(torch.cat([pick + jitter, torch.full((3, 3), 1e3, dtype=torch.float64)]))
    points = tg.JaggedTensor(parts).to(device)
    data = torch.randn(grid.total_voxels, 2, 3, dtype=dtype, device=device, requires_grad=True)
    out = grid.sample_nearest(points, data)
    assert torch.equal(out.joffsets.cpu(), points.joffsets.cpu())
    corners = [(0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0), (1, 0, 0), (1, 0, 1), (1, 1, 1), (1, 1, 0)]
    want = torch.zeros(out.jdata.shape, dtype=torch.float64)
    chosen = []
    for n, (b, p) in enumerate(zip(points.jidx.cpu().tolist(), points.jdata.cpu().tolist())):
        u = [(p[a] - float(grid.origins[b, a])) / float(grid.voxel_sizes[b, a]) for a in range(3)]
        base = [math.floor(x) for x in u]
        best, best_d = None, 4.0
        for c in corners:
            r = rows.get((b, *(base[a] + c[a] for a in range(3))))
            d = sum((c[a] - (u[a] - base[a])) ** 2 for a in range(3))
            if r is not None and d < best_d:
                best, best_d = r, d
        chosen.append(best)
        if best is not None:
            want[n] = data[best].detach().double().cpu()
    assert sum(c is not None for c in chosen) > 300  # most points have an active corner
    torch.testing.assert_close(out.jdata.double().cpu(), want, rtol=0, atol=0)
    weights = torch.randn_like(out.jdata)
    (out.jdata * weights).sum().backward()
    grad = torch.zeros(grid.total_voxels, 2, 3, dtype=torch.float64)
    for n, r in enumerate(chosen):
        if r is not None:
            grad[r] += weights[n].double().cpu()
    torch.testing.assert_close(data.grad.double().cpu(), grad, rtol=1e-6, atol=1e-6)


def test_sample_nearest_refuses_bad_points():
    grid = random_grid("cpu")
    data = torch.randn(grid.total_voxels, 1)
    with pytest.raises(ValueError, match="points must be finite"):
        grid.sample_nearest(tg.JaggedTensor([torch.tensor([[0.0, float("nan"), 0]]), torch.zeros(0, 3)]), data)
    with pytest.raises(ValueError, match="holds 1 tensors but the grid batch has 2 grids"):
        grid.sample_nearest(tg.JaggedTensor([torch.zeros(2, 3)]), data)
    with pytest.raises(ValueError, match=r"voxel_data must have \d+ rows"):
        grid.sample_nearest(tg.JaggedTensor([torch.zeros(2, 3), torch.zeros(1, 3)]), data[:-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extent, bitshift", [(0, 0), (1, 0), (2, 0), (1, 1)])
def test_neighbor_indexes_match_lookups(device, extent, bitshift):
    grid = random_grid(device)
    rows = voxel_rows(grid)
    first = grid.joffsets.cpu().tolist()
    # Random queries, and each grid's first 5 voxels (coarsened by bitshift) so that some hit.
    voxels = [t.cpu() >> bitshift for t in grid.ijk.unbind()]
    queries = tg.JaggedTensor([torch.cat([torch.randint(-9 >> bitshift, 9 >> bitshift, (n, 3)), v[:5]])
                               for n, v in zip((40, 25), voxels)]).to(device)
    out = grid.neighbor_indexes(queries, extent, bitshift)
    side = 2 * extent + 1
    total = queries.jdata.shape[0]
    assert out.jdata.shape == (total, side, side, side) and out.jdata.dtype == torch.int64
    assert torch.equal(out.joffsets.cpu(), queries.joffsets.cpu())
    got = out.jdata.cpu()
    for n, (b, c) in enumerate(zip(queries.jidx.cpu().tolist(), queries.jdata.cpu().tolist())):
        for di, dj, dk in itertools.product(range(side), repeat=3):
            key = (b, (c[0] << bitshift) + di - extent, (c[1] << bitshift) + dj - extent,
                   (c[2] << bitshift) + dk - extent)
            want = rows[key] - first[b] if key in rows else -1  # within its own grid
            assert got[n, di, dj, dk] == want
    assert (got >= 0).any()
    with pytest.raises(ValueError, match="extent must be >= 0"):
        grid.neighbor_indexes(queries, -1)


def overlapping_grids(device):
    """Two batches of two grids over the same small box, so that about half their voxels
    coincide."""
    def one():
        return tg.GridBatch.from_ijk(tg.JaggedTensor(
            [torch.unique(torch.randint(0, 6, (n, 3), dtype=torch.int32), dim=0) for n in (120, 90)])).to(device)
    return one(), one()


@pytest.mark.parametrize("device", DEVICES)
def test_inject_copies_the_voxels_both_grids_have(device):
    dst_grid, src_grid = overlapping_grids(device)
    src_rows = voxel_rows(src_grid)
    src = torch.randn(src_grid.total_voxels, 4, dtype=torch.float64, device=device, requires_grad=True)
    # Reference: dst voxel v takes src's row at the same (grid, ijk), or keeps its value.
    match = [src_rows.get(k) for k in voxel_rows(dst_grid)]
    assert 0 < sum(m is not None for m in match) < len(match)

    out = dst_grid.inject_from(src_grid, src, default_value=-7.0)
    assert isinstance(out, tg.JaggedTensor) and torch.equal(out.joffsets, dst_grid.joffsets)
    want = torch.full((dst_grid.total_voxels, 4), -7.0, dtype=torch.float64)
    for v, m in enumerate(match):
        if m is not None:
            want[v] = src[m].detach().cpu()
    torch.testing.assert_close(out.jdata.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(src_grid.inject_to(dst_grid, src, default_value=-7.0).jdata, out.jdata)

    # Into given features, in place, with gradients to both.
    base = torch.randn(dst_grid.total_voxels, 4, dtype=torch.float64, device=device, requires_grad=True)
    dst = dst_grid.jagged_like(base * 1)
    written = dst_grid.inject_from(src_grid, src, dst=dst)
    assert written.jdata is dst.jdata  # in place, as fVDB's
    weights = torch.randn_like(written.jdata)
    (written.jdata * weights).sum().backward()
    grad_src = torch.zeros(src_grid.total_voxels, 4, dtype=torch.float64)
    grad_base = weights.detach().cpu().clone()
    for v, m in enumerate(match):
        if m is not None:
            grad_src[m] += weights[v].cpu()
            grad_base[v] = 0
    torch.testing.assert_close(src.grad.cpu(), grad_src)
    torch.testing.assert_close(base.grad.cpu(), grad_base)

    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        dst_grid.inject_from(src_grid, src, dst=base)
    with pytest.raises(ValueError, match="hold 2 and 1 grids"):
        dst_grid.inject_from(tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)])).to(device),
                             torch.zeros(1, 4, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="one element shape"):
        dst_grid.inject_from(src_grid, src.detach(), dst=torch.zeros(dst_grid.total_voxels, 3,
                                                                     dtype=torch.float64, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_inject_from_ijk_writes_the_active_coordinates(device):
    grid, _ = overlapping_grids(device)
    rows = voxel_rows(grid)
    coords = [torch.unique(torch.randint(-1, 7, (n, 3)), dim=0) for n in (60, 40)]
    src_ijk = tg.JaggedTensor(coords).to(device)
    src = torch.randn(src_ijk.jdata.shape[0], 2, device=device, requires_grad=True)
    out = grid.inject_from_ijk(src_ijk, src_ijk.jagged_like(src))
    want = torch.zeros(grid.total_voxels, 2)
    hit = []
    for n, (b, c) in enumerate(zip(src_ijk.jidx.cpu().tolist(), src_ijk.jdata.cpu().tolist())):
        r = rows.get((b, *c))
        hit.append(r)
        if r is not None:
            want[r] = src[n].detach().cpu()
    assert any(h is not None for h in hit) and any(h is None for h in hit)
    torch.testing.assert_close(out.jdata.cpu(), want, rtol=0, atol=0)
    out.jdata.sum().backward()
    torch.testing.assert_close(src.grad.cpu(), torch.tensor([[1.0, 1.0] if h is not None else [0.0, 0.0] for h in hit]))


@pytest.mark.parametrize("device", DEVICES)
def test_dense_injection_matches_loops_in_both_layouts(device):
    grid = random_grid(device, spread=4)
    data = torch.randn(grid.total_voxels, 3, device=device, dtype=torch.float64, requires_grad=True)
    ijk, jidx = grid.ijk.jdata.cpu().tolist(), grid.jidx.cpu().tolist()
    low = [[-2, -3, -1], [0, -4, -2]]
    size = [5, 6, 4]
    dense = grid.inject_to_dense_cminor(data, min_coord=low, grid_size=size)
    want = torch.zeros(2, *size, 3, dtype=torch.float64)
    inside = []
    for r, (b, c) in enumerate(zip(jidx, ijk)):
        local = [c[a] - low[b][a] for a in range(3)]
        if all(0 <= local[a] < size[a] for a in range(3)):
            want[b, local[0], local[1], local[2]] = data[r].detach().cpu()
            inside.append(r)
    assert 0 < len(inside) < grid.total_voxels
    torch.testing.assert_close(dense.cpu(), want, rtol=0, atol=0)
    major = grid.inject_to_dense_cmajor(data, min_coord=low, grid_size=size)
    assert major.shape == (2, 3, *size)
    torch.testing.assert_close(major.cpu(), want.permute(0, 4, 1, 2, 3))
    # Defaults: the batch's bounding box, every voxel inside.
    full = grid.inject_to_dense_cminor(data)
    box = grid.total_bbox.cpu()
    assert list(full.shape) == [2, *(box[1] - box[0] + 1).tolist(), 3]

    # Back from the volumes: dense_origins per grid; voxels outside read zeros.
    volume = torch.randn(2, 5, 6, 4, 3, dtype=torch.float64, device=device, requires_grad=True)
    back = grid.inject_from_dense_cminor(volume, dense_origins=low)
    assert torch.equal(back.joffsets, grid.joffsets)
    want_back = torch.zeros(grid.total_voxels, 3, dtype=torch.float64)
    for r in inside:
        b, c = jidx[r], ijk[r]
        want_back[r] = volume[b, c[0] - low[b][0], c[1] - low[b][1], c[2] - low[b][2]].detach().cpu()
    torch.testing.assert_close(back.jdata.cpu(), want_back, rtol=0, atol=0)
    from_major = grid.inject_from_dense_cmajor(volume.detach().permute(0, 4, 1, 2, 3), dense_origins=low)
    torch.testing.assert_close(from_major.jdata, back.jdata.detach())
    # The two are each other's adjoints: <to_dense(x), y> = <x, from_dense(y)>.
    y = volume.detach()
    torch.testing.assert_close((dense * y).sum(), (data * grid.inject_from_dense_cminor(y, low).jdata).sum())
    (back.jdata * data.detach()).sum().backward()
    torch.testing.assert_close(volume.grad, grid.inject_to_dense_cminor(data.detach(), low, size))


def test_old_dense_injection_names_warn_and_keep_their_defaults():
    grid = random_grid("cpu", spread=4)
    data = torch.randn(grid.total_voxels, 2)
    with pytest.warns(DeprecationWarning, match="inject_to_dense_cminor"):
        dense = grid.inject_to_dense(data)
    torch.testing.assert_close(dense, grid.inject_to_dense_cminor(data))
    with pytest.warns(DeprecationWarning, match="inject_from_dense_cminor"):
        back = grid.inject_from_dense(dense)
    torch.testing.assert_close(back, data)
    lo = (grid.total_bbox[0] + 1).tolist()
    with pytest.warns(DeprecationWarning):
        part = grid.inject_to_dense(data, min_coord=lo)
    assert list(part.shape[1:4]) == (grid.total_bbox[1] - grid.total_bbox[0]).tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_merged_grid_is_the_union(device):
    a, b = overlapping_grids(device)
    b = tg.GridBatch.from_ijk(b.ijk, voxel_sizes=3.0).to(device)
    merged = a.merged_grid(b)
    assert set(voxel_rows(merged)) == set(voxel_rows(a)) | set(voxel_rows(b))
    assert torch.equal(merged.voxel_sizes, a.voxel_sizes) and torch.equal(merged.origins, a.origins)


@pytest.mark.parametrize("device", DEVICES)
def test_clip_keeps_the_voxels_in_each_box(device):
    grid = random_grid(device)
    lo, hi = [[-3, -5, 0], [-8, -8, -8]], [[4, 2, 7], [0, 0, 0]]
    features = torch.randn(grid.total_voxels, 3, device=device, requires_grad=True)
    clipped_features, clipped = grid.clip(features, lo, hi)
    keep = [r for (b, *c), r in voxel_rows(grid).items()
            if all(lo[b][a] <= c[a] <= hi[b][a] for a in range(3))]
    assert 0 < len(keep) < grid.total_voxels
    assert torch.equal(clipped.ijk.jdata.cpu(), grid.ijk.jdata.cpu()[keep])  # the grid's order
    assert torch.equal(clipped_features.joffsets, clipped.joffsets)
    torch.testing.assert_close(clipped_features.jdata, features[keep], rtol=0, atol=0)
    clipped_features.jdata.sum().backward()
    want = torch.zeros(grid.total_voxels, 3)
    want[keep] = 1
    torch.testing.assert_close(features.grad.cpu(), want)
    only = grid.clipped_grid(lo, hi)
    assert torch.equal(only.ijk.jdata, clipped.ijk.jdata)
    # One box for all grids.
    same = grid.clipped_grid(-2, 2)
    assert set(voxel_rows(same)) == {k for k in voxel_rows(grid) if all(-2 <= x <= 2 for x in k[1:])}


@pytest.mark.parametrize("device", DEVICES)
def test_from_dense_with_a_mask(device):
    mask = torch.rand(4, 3, 5, device=device) < 0.4
    grid = tg.GridBatch.from_dense(2, [4, 3, 5], ijk_min=[-1, 2, 0], mask=mask, voxel_sizes=0.5)
    assert grid.device.type == device  # the mask's device
    want = {(b, i - 1, j + 2, k) for b in range(2) for i, j, k in mask.nonzero().cpu().tolist()}
    assert set(voxel_rows(grid)) == want
    assert grid.voxel_sizes.tolist() == [[0.5] * 3] * 2
    with pytest.raises(ValueError, match=r"mask must have the shape dense_dims \[4, 3, 5\]"):
        tg.GridBatch.from_dense(1, [4, 3, 5], mask=mask[:3])
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        tg.GridBatch.from_dense(1, [4, 3, 5], mask=mask.float())


def test_from_dense_takes_a_device_where_mask_now_is_with_a_warning():
    with pytest.warns(DeprecationWarning, match="device is now the argument after mask"):
        grid = tg.GridBatch.from_dense(1, [2, 2, 2], 0, 1.0, 0.0, "cpu")
    assert grid.total_voxels == 8
