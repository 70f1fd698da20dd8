"""Spline sampling and splatting with spatial gradients (grid/spline.py, fVDB's names):
sample_trilinear_with_grad, sample_bezier, sample_bezier_with_grad and splat_bezier, each
against a float64 reference written here (Python loops over each point's voxels and a
dictionary of the active ones), the gradients against central differences of that reference,
splat_bezier as sample_bezier's adjoint, and autograd's gradcheck; on multi-grid batches with
an empty grid and points far outside, on the CPU and, where there is one, the GPU."""

import itertools
import math

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES
from points_near_voxels import points_near_voxels

SIZES = ((0.5, 0.25, 1.0), (1.0, 1.0, 1.0), (2.0, 2.0, 2.0))


def random_grid(device, counts=(250, 0, 90), spread=6):
    ijk = [torch.unique(torch.randint(-spread, spread, (n, 3), dtype=torch.int32), dim=0) for n in counts]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[list(s) for s in SIZES[:len(counts)]],
                                 origins=torch.randn(len(counts), 3).tolist())
    return grid.to(device)


def voxel_rows(grid) -> dict:
    """{(grid, i, j, k): row in the batch} of every active voxel."""
    ijk, jidx = grid.ijk.jdata.cpu().tolist(), grid.jidx.cpu().tolist()
    return {(b, *c): r for r, (b, c) in enumerate(zip(jidx, ijk))}


def points_near(grid, counts=(120, 15, 60), far=3):
    """float64 points within 0.95 voxels (along each axis) of random active voxels of each grid
    (random points for a grid without voxels), and `far` points far from every voxel, a tensor
    per grid."""
    return points_near_voxels(grid, counts, spread=0.95, empty_scale=5,
                              far=torch.full((far, 3), 1e4, dtype=torch.float64))


def bezier_1d(x: float) -> float:
    """fVDB's quadratic weight of a voxel at distance x (in voxels) from the point."""
    if -1.5 <= x < -0.5:
        return (x + 1.5) ** 2
    if -0.5 <= x < 0.5:
        return -2 * x * x + 1.5
    if 0.5 <= x < 1.5:
        return (x - 1.5) ** 2
    return 0.0


def voxel_coordinates(grid, b: int, p) -> list:
    return [(p[a] - float(grid.origins[b, a])) / float(grid.voxel_sizes[b, a]) for a in range(3)]


def reference_weights(grid, rows, b: int, p, bezier: bool) -> list:
    """[(row, weight)] of the active voxels that interpolate at world point p of grid b."""
    u = voxel_coordinates(grid, b, p)
    out = []
    if bezier:
        centre = [math.floor(x + 0.5) for x in u]
        for d in itertools.product((-1, 0, 1), repeat=3):
            v = [centre[a] + d[a] for a in range(3)]
            r = rows.get((b, *v))
            if r is not None:
                out.append((r, math.prod(bezier_1d(u[a] - v[a]) for a in range(3))))
    else:
        low = [math.floor(x) for x in u]
        for d in itertools.product((0, 1), repeat=3):
            v = [low[a] + d[a] for a in range(3)]
            r = rows.get((b, *v))
            if r is not None:
                out.append((r, math.prod(1 - abs(u[a] - v[a]) for a in range(3))))
    return out


def reference_sample(grid, rows, b, p, data, bezier):
    """The interpolated features [C] at world point p (float64)."""
    out = torch.zeros(data.shape[1], dtype=torch.float64)
    for r, w in reference_weights(grid, rows, b, p, bezier):
        out += w * data[r]
    return out


def reference_gradient(grid, rows, b, p, data, bezier, h=1e-6):
    """[C, 3]: central differences of reference_sample in the world position."""
    cols = []
    for a in range(3):
        hi, lo = list(p), list(p)
        hi[a] += h
        lo[a] -= h
        cols.append((reference_sample(grid, rows, b, hi, data, bezier)
                     - reference_sample(grid, rows, b, lo, data, bezier)) / (2 * h))
    return torch.stack(cols, -1)


def away_from_cell_faces(grid, parts, margin=1e-3):
    """The points moved off the faces of the cells between voxel centres, where the trilinear
    field is not differentiable (central differences would straddle two cells)."""
    out = []
    for b, pts in enumerate(parts):
        u = (pts - grid.origins[b]) / grid.voxel_sizes[b]
        frac = u - torch.floor(u)
        u = torch.where(frac < margin, u + 2 * margin, torch.where(frac > 1 - margin, u - 2 * margin, u))
        out.append(u * grid.voxel_sizes[b] + grid.origins[b])
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bezier", [False, True], ids=["trilinear", "bezier"])
def test_sample_with_grad_matches_the_reference_and_its_differences(device, bezier):
    grid = random_grid(device)
    rows = voxel_rows(grid)
    parts = points_near(grid)
    if not bezier:
        parts = away_from_cell_faces(grid, parts)
    points = tg.JaggedTensor(parts).to(device)
    data = torch.randn(grid.total_voxels, 2, 3, dtype=torch.float64, device=device)
    sample = grid.sample_bezier_with_grad if bezier else grid.sample_trilinear_with_grad
    values, gradients = sample(points, data)
    n = points.jdata.shape[0]
    assert values.jdata.shape == (n, 2, 3) and gradients.jdata.shape == (n, 2, 3, 3)
    assert torch.equal(values.joffsets.cpu(), points.joffsets.cpu())
    assert torch.equal(gradients.joffsets.cpu(), points.joffsets.cpu())
    flat = data.reshape(grid.total_voxels, -1).cpu()
    want_v = torch.zeros(n, 6, dtype=torch.float64)
    want_g = torch.zeros(n, 6, 3, dtype=torch.float64)
    for i, (b, p) in enumerate(zip(points.jidx.cpu().tolist(), points.jdata.cpu().tolist())):
        want_v[i] = reference_sample(grid, rows, b, p, flat, bezier)
        want_g[i] = reference_gradient(grid, rows, b, p, flat, bezier)
    assert (want_v.abs().sum(1) > 0).sum() > 150  # most points are near active voxels
    torch.testing.assert_close(values.jdata.cpu().reshape(n, 6), want_v, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gradients.jdata.cpu().reshape(n, 6, 3), want_g, rtol=1e-5, atol=1e-5)
    assert (values.jdata[-3:] == 0).all() and (gradients.jdata[-3:] == 0).all()  # far points
    if not bezier:  # the values are sample_trilinear's
        torch.testing.assert_close(values.jdata, grid.sample_trilinear(points, data).jdata)
    else:
        torch.testing.assert_close(values.jdata, grid.sample_bezier(points, data).jdata, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_sample_bezier_matches_the_reference_in_float32(device):
    grid = random_grid(device)
    rows = voxel_rows(grid)
    points = tg.JaggedTensor(points_near(grid)).to(device)
    data = torch.randn(grid.total_voxels, 4, device=device)
    out = grid.sample_bezier(points.to(torch.float32), data)
    assert out.jdata.dtype == torch.float32 and out.jdata.shape == (points.jdata.shape[0], 4)
    want = torch.stack([reference_sample(grid, rows, b, p, data.cpu().double(), True) for b, p in
                        zip(points.jidx.cpu().tolist(), points.jdata.to(torch.float32).double().cpu().tolist())])
    torch.testing.assert_close(out.jdata.cpu().double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_bezier_weights_are_fvdbs(device):
    """A field that is 1 on a dense block samples 8 well inside it (fVDB's weights add up to 8),
    and one active voxel gives its own weight: 1.5^3 at its centre, (1.5 - 2 t^2)(...) near."""
    block = tg.GridBatch.from_dense(1, 7, ijk_min=-3, voxel_sizes=0.5, origins=[1.0, 2.0, 3.0]).to(device)
    inner = tg.JaggedTensor([(torch.rand(50, 3, dtype=torch.float64) - 0.5) * 2 + torch.tensor([1.0, 2.0, 3.0])])
    ones = torch.ones(block.total_voxels, dtype=torch.float64, device=device)
    out = block.sample_bezier(inner.to(device), ones)
    assert out.jdata.shape == (50,)
    torch.testing.assert_close(out.jdata.cpu(), torch.full((50,), 8.0, dtype=torch.float64))
    one = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)])).to(device)
    p = torch.tensor([[0.0, 0.0, 0.0], [0.2, -0.3, 0.1], [0.7, 0.0, 0.0], [1.6, 0.0, 0.0]], dtype=torch.float64)
    got = one.sample_bezier(tg.JaggedTensor([p]).to(device), torch.ones(1, 1, dtype=torch.float64, device=device))
    want = [1.5**3, (1.5 - 2 * 0.04) * (1.5 - 2 * 0.09) * (1.5 - 2 * 0.01), (0.7 - 1.5) ** 2 * 1.5**2, 0.0]
    torch.testing.assert_close(got.jdata[:, 0].cpu(), torch.tensor(want, dtype=torch.float64))


@pytest.mark.parametrize("device", DEVICES)
def test_splat_bezier_is_the_reference_spread_and_the_adjoint_of_sample_bezier(device):
    grid = random_grid(device)
    rows = voxel_rows(grid)
    points = tg.JaggedTensor(points_near(grid)).to(device)
    n = points.jdata.shape[0]
    values = torch.randn(n, 3, dtype=torch.float64, device=device)
    out = grid.splat_bezier(points, values)
    assert out.jdata.shape == (grid.total_voxels, 3)
    assert torch.equal(out.joffsets.cpu(), grid.voxel_offsets.cpu())
    want = torch.zeros(grid.total_voxels, 3, dtype=torch.float64)
    for i, (b, p) in enumerate(zip(points.jidx.cpu().tolist(), points.jdata.cpu().tolist())):
        for r, w in reference_weights(grid, rows, b, p, True):
            want[r] += w * values[i].cpu()
    torch.testing.assert_close(out.jdata.cpu(), want, rtol=1e-10, atol=1e-10)
    f = torch.randn(grid.total_voxels, 3, dtype=torch.float64, device=device)
    lhs = (out.jdata * f).sum()
    rhs = (values * grid.sample_bezier(points, f).jdata).sum()
    torch.testing.assert_close(lhs, rhs, rtol=1e-12, atol=1e-12)
    # A JaggedTensor of values and a [N] vector work alike.
    vector = grid.splat_bezier(points, points.jagged_like(values[:, 0]))
    torch.testing.assert_close(vector.jdata, out.jdata[:, 0])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_in_both_inputs(device):
    grid = random_grid(device, counts=(40, 0, 25), spread=3)
    points = tg.JaggedTensor(points_near(grid, counts=(8, 3, 6), far=1)).to(device)
    offsets = points.joffsets
    data = torch.randn(grid.total_voxels, 2, dtype=torch.float64, device=device, requires_grad=True)
    p = points.jdata.clone().requires_grad_()

    def jag(q):
        return tg.JaggedTensor.from_data_and_offsets(q, offsets)

    assert torch.autograd.gradcheck(lambda d, q: grid.sample_bezier(jag(q), d).jdata, (data, p))
    assert torch.autograd.gradcheck(lambda d, q: grid.sample_bezier_with_grad(jag(q), d)[1].jdata, (data, p))
    values = torch.randn(p.shape[0], 2, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, q: grid.splat_bezier(jag(q), v).jdata, (values, p))
    q = torch.cat(away_from_cell_faces(grid, [t.cpu() for t in points.unbind()], margin=1e-2)).to(device)
    q.requires_grad_()
    assert torch.autograd.gradcheck(lambda d, q: torch.cat([t.jdata.flatten() for t in
                                    grid.sample_trilinear_with_grad(jag(q), d)]), (data, q))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bezier", [False, True], ids=["trilinear", "bezier"])
def test_the_returned_gradient_is_autograds_gradient_of_the_values(device, bezier):
    grid = random_grid(device)
    parts = points_near(grid)
    if not bezier:
        parts = away_from_cell_faces(grid, parts)
    points = tg.JaggedTensor(parts).to(device)
    data = torch.randn(grid.total_voxels, 3, dtype=torch.float64, device=device)
    p = points.jdata.clone().requires_grad_()
    sample = grid.sample_bezier_with_grad if bezier else grid.sample_trilinear_with_grad
    values, gradients = sample(tg.JaggedTensor.from_data_and_offsets(p, points.joffsets), data)
    for c in range(3):
        (g,) = torch.autograd.grad(values.jdata[:, c].sum(), p, retain_graph=True)
        torch.testing.assert_close(gradients.jdata[:, c], g, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_low_precision_features_empty_points_and_empty_batches(device):
    grid = random_grid(device)
    points = tg.JaggedTensor([t.float() for t in points_near(grid)]).to(device)
    data = torch.randn(grid.total_voxels, 2, device=device)
    for low in (torch.float16, torch.bfloat16):
        for fn in (grid.sample_bezier, lambda p, d: grid.sample_bezier_with_grad(p, d)[1],
                   lambda p, d: grid.sample_trilinear_with_grad(p, d)[0]):
            got = fn(points, data.to(low)).jdata
            assert got.dtype == low
            torch.testing.assert_close(got.float(), fn(points, data.to(low).float()).jdata, rtol=1e-2, atol=5e-2)
        assert grid.splat_bezier(points, points.jdata[:, :2].to(low)).jdata.dtype == low
    none = tg.JaggedTensor([torch.zeros(0, 3, device=device) for _ in range(3)])
    assert grid.sample_bezier(none, data).jdata.shape == (0, 2)
    values, gradients = grid.sample_bezier_with_grad(none, data)
    assert values.jdata.shape == (0, 2) and gradients.jdata.shape == (0, 2, 3)
    assert (grid.splat_bezier(none, torch.zeros(0, 2, device=device)).jdata == 0).all()
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32)] * 2)).to(device)
    pts = tg.JaggedTensor([torch.randn(4, 3, device=device), torch.randn(2, 3, device=device)])
    nothing = torch.zeros(0, 5, device=device)
    assert torch.equal(empty.sample_bezier(pts, nothing).jdata, torch.zeros(6, 5, device=device))
    values, gradients = empty.sample_trilinear_with_grad(pts, nothing)
    assert values.jdata.shape == (6, 5) and (gradients.jdata == 0).all() and gradients.jdata.shape == (6, 5, 3)
    assert empty.splat_bezier(pts, torch.ones(6, 5, device=device)).jdata.shape == (0, 5)


def test_bad_inputs_are_refused_before_any_work():
    grid = random_grid("cpu")
    points = tg.JaggedTensor([torch.zeros(2, 3), torch.zeros(1, 3), torch.zeros(0, 3)])
    data = torch.zeros(grid.total_voxels, 2)
    for name in ("sample_bezier", "sample_bezier_with_grad", "sample_trilinear_with_grad"):
        fn = getattr(grid, name)
        with pytest.raises(TypeError, match=f"GridBatch.{name}: points must be a JaggedTensor, got Tensor"):
            fn(torch.zeros(3, 3), data)
        with pytest.raises(ValueError, match="points holds 1 tensors but the grid batch has 3 grids"):
            fn(tg.JaggedTensor([torch.zeros(2, 3)]), data)
        with pytest.raises(TypeError, match="points must be floating point, got torch.int64"):
            fn(tg.JaggedTensor([torch.zeros(2, 3, dtype=torch.int64)] * 3), data)
        with pytest.raises(ValueError, match=r"points must be \[N, 3\], got \[6, 2\]"):
            fn(tg.JaggedTensor([torch.zeros(2, 2)] * 3), data)
        with pytest.raises(ValueError, match=r"points must be finite, got \[0.0, nan, 0.0\] at row 1"):
            fn(tg.JaggedTensor([torch.tensor([[0, 0, 0], [0, float("nan"), 0]]), torch.zeros(0, 3),
                                torch.zeros(0, 3)]), data)
        with pytest.raises(ValueError, match=rf"voxel_data must have {grid.total_voxels} rows \(one a voxel\), "
                                             rf"got shape \[{grid.total_voxels - 1}, 2\]"):
            fn(points, data[1:])
        with pytest.raises(TypeError, match="points and voxel_data must have one dtype .* got torch.float32 and "
                                            "torch.float64"):
            fn(points, data.double())
        with pytest.raises(TypeError, match="voxel_data must be floating point, got torch.int64"):
            fn(points, data.long())
        with pytest.raises(TypeError, match="voxel_data must be a tensor or a JaggedTensor, got list"):
            fn(points, [0.0])
        with pytest.raises(ValueError, match="points is on meta but the grid is on cpu"):
            fn(points.to("meta"), data)
        with pytest.raises(ValueError, match="voxel_data is on meta but the grid is on cpu"):
            fn(points, data.to("meta"))
    with pytest.raises(ValueError, match=r"points_data must have 3 rows \(one a point\), got shape \[4, 2\]"):
        grid.splat_bezier(points, torch.zeros(4, 2))
    with pytest.raises(TypeError, match="points and points_data must have one dtype"):
        grid.splat_bezier(points, torch.zeros(3, 2, dtype=torch.float64))
