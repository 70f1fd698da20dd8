"""GridBatch.integrate_tsdf: the per-voxel update against a float64 torch reference of the rule
on random grids and images; the grid grows over the whole truncation band of every measured
pixel; repeated images add weight and keep the average; a sphere seen from six sides fuses into
a TSDF whose zero level is the sphere (against its analytic SDF, and meshed by marching cubes);
bad inputs are refused before anything runs; the GPU gives the CPU's numbers."""

import math

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES, requires_cuda


def look_at(eye, target=(0.0, 0.0, 0.0)):
    """cam_to_world [4, 4] of a camera at eye looking at target (camera +z forward)."""
    eye, target = torch.tensor(eye, dtype=torch.float64), torch.tensor(target, dtype=torch.float64)
    z = torch.nn.functional.normalize(target - eye, dim=0)
    helper = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    if abs(float(z @ helper)) > 0.9:
        helper = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    x = torch.nn.functional.normalize(torch.linalg.cross(helper, z), dim=0)
    y = torch.linalg.cross(z, x)
    m = torch.eye(4, dtype=torch.float64)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = x, y, z, eye
    return m


def intrinsics(width, height, fov=0.8):
    f = 0.5 * width / math.tan(fov / 2)
    return torch.tensor([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], dtype=torch.float64)


def sphere_depth(K, cam_to_world, width, height, radius):
    """z-depth image of a sphere of `radius` at the origin (0 where the ray misses)."""
    rows, cols = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64),
                                indexing="ij")
    ray = torch.stack([(cols + 0.5 - K[0, 2]) / K[0, 0], (rows + 0.5 - K[1, 2]) / K[1, 1],
                       torch.ones_like(rows)], -1)  # camera frame, z = 1
    d = ray @ cam_to_world[:3, :3].T
    o = cam_to_world[:3, 3]
    a, b, c = (d * d).sum(-1), 2 * (d @ o), float(o @ o) - radius ** 2
    disc = b * b - 4 * a * c
    z = (-b - disc.clamp_min(0).sqrt()) / (2 * a)  # the ray's parameter is z (ray has z = 1)
    return torch.where(disc > 0, z, torch.zeros_like(z))


def reference(grid, trunc, K, cam_to_world, depths, tsdf, weights, pixel_weights=None):
    """The rule of tilegrid/grid/tsdf.h in float64 torch, voxel by voxel."""
    ijk = grid.ijk
    centres = grid.voxel_to_world(ijk).jdata.double().cpu()
    b = ijk.jidx.long().cpu()
    w2c = torch.linalg.inv(cam_to_world.double())[b]
    c = (w2c[:, :3, :3] @ centres[:, :, None])[..., 0] + w2c[:, :3, 3]
    Kb = K.double()[b]
    z = c[:, 2]
    u = Kb[:, 0, 0] * c[:, 0] / z + Kb[:, 0, 1] * c[:, 1] / z + Kb[:, 0, 2]
    v = Kb[:, 1, 1] * c[:, 1] / z + Kb[:, 1, 2]
    H, W = depths.shape[1:]
    ok = (z > 0) & (u >= 0) & (v >= 0) & (u < W) & (v < H)
    uc, vc = u.clamp(0, W - 1).long(), v.clamp(0, H - 1).long()
    d = depths.double().cpu()[b, vc, uc]
    wo = pixel_weights.double().cpu()[b, vc, uc] if pixel_weights is not None else torch.ones_like(d)
    sdf = d - z
    ok &= (d > 0) & torch.isfinite(d) & (sdf >= -trunc) & (wo > 0)
    t, w = tsdf.double().cpu().clone(), weights.double().cpu().clone()
    obs = sdf.clamp(max=trunc)
    t[ok] = (w[ok] * t[ok] + wo[ok] * obs[ok]) / (w[ok] + wo[ok])
    w[ok] = w[ok] + wo[ok]
    return t, w


def empty_state(grid, dtype, device):
    z = torch.zeros(grid.total_voxels, dtype=dtype, device=device)
    return z, z.clone()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_update_matches_the_float64_rule_on_random_grids_and_images(device, dtype):
    g = torch.Generator().manual_seed(3)
    ijk = [torch.randint(-12, 12, (400, 3), generator=g, dtype=torch.int32) for _ in range(2)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([t.to(device) for t in ijk]), voxel_sizes=[[0.1] * 3, [0.13] * 3],
                                 origins=[[0.0, 0.0, 0.0], [0.05, -0.1, 0.2]])
    H, W = 24, 32
    K = torch.stack([intrinsics(W, H), intrinsics(W, H, fov=1.1)])
    K[1, 0, 1] = 0.7  # a skewed camera
    poses = torch.stack([look_at((0.3, -0.2, -3.0)), look_at((2.0, 1.0, 1.5), (0.1, 0.0, 0.0))])
    depths = (2.0 + 1.5 * torch.rand(2, H, W, generator=g, dtype=torch.float64))
    depths[0, :3] = 0  # rows with nothing measured
    depths[1, 5, 7] = float("inf")
    pixel_weights = torch.rand(2, H, W, generator=g, dtype=torch.float64)
    pixel_weights[:, :, 0] = 0
    tsdf0 = 0.1 * torch.randn(grid.total_voxels, generator=g, dtype=torch.float64)
    weights0 = torch.rand(grid.total_voxels, generator=g, dtype=torch.float64) * 3
    trunc = 0.35
    grown, tsdf, weights = grid.integrate_tsdf(trunc, K, poses, tsdf0.to(device, dtype), weights0.to(device, dtype),
                                               depths.to(device, dtype), pixel_weights.to(device, dtype))
    # The old voxels keep their rows' values going in; new ones start at 0, weight 0.
    rows = grown.ijk_to_index(grid.ijk, cumulative=True).jdata.cpu()
    assert bool((rows >= 0).all())
    t_in = torch.zeros(grown.total_voxels, dtype=torch.float64)
    w_in = torch.zeros_like(t_in)
    t_in[rows], w_in[rows] = tsdf0.to(dtype).double(), weights0.to(dtype).double()
    want_t, want_w = reference(grown, trunc, K, poses, depths.to(dtype), t_in, w_in, pixel_weights.to(dtype))
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert tsdf.jdata.shape == (grown.total_voxels,)
    torch.testing.assert_close(tsdf.jdata.double().cpu(), want_t, atol=tol, rtol=tol)
    torch.testing.assert_close(weights.jdata.double().cpu(), want_w, atol=tol, rtol=tol)
    assert int((want_w > w_in).sum()) > 100  # the test integrates something
    assert torch.equal(tsdf.joffsets.cpu(), grown.voxel_offsets.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_grid_grows_over_every_measured_pixels_band(device):
    H, W = 16, 16
    K, pose = intrinsics(W, H)[None], look_at((0.0, 0.0, -2.0))[None]
    depths = torch.full((1, H, W), 2.0, dtype=torch.float64)
    depths[0, :, :8] = 0
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32, device=device)]),
                                  voxel_sizes=[[0.05] * 3])
    trunc = 0.2
    grown, tsdf, weights = empty.integrate_tsdf(trunc, K, pose, *empty_state(empty, torch.float64, device),
                                                depths.to(device))
    # Dense samples of every measured pixel's ray over [d - trunc, d + trunc].
    rows, cols = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64),
                                indexing="ij")
    seen = depths[0] > 0
    ray = torch.stack([(cols[seen] + 0.5 - K[0, 0, 2]) / K[0, 0, 0], (rows[seen] + 0.5 - K[0, 1, 2]) / K[0, 1, 1],
                       torch.ones(int(seen.sum()), dtype=torch.float64)], 1)
    z = 2.0 + torch.linspace(-trunc, trunc, 200, dtype=torch.float64)
    pts = (ray[:, None, :] * z[None, :, None]).reshape(-1, 3) @ pose[0, :3, :3].T + pose[0, :3, 3]
    # Samples half a voxel apart can step over the corner of a voxel that a ray only clips:
    # those points are within one voxel of the band's voxels, and few.
    inside = grown.points_in_grid(tg.JaggedTensor([pts.to(device)])).jdata
    assert float(inside.double().mean()) > 0.97
    assert bool(grown.dilated_grid(1).points_in_grid(tg.JaggedTensor([pts.to(device)])).jdata.all())
    # Nothing is added for unmeasured pixels (the image's left half: world x < 0, the camera's x
    # axis being the world's +x here); the measured rays all have x > 0, so every voxel centre
    # is at x >= -half a voxel.
    centres = grown.voxel_to_world(grown.ijk).jdata.cpu()
    assert float(centres[:, 0].min()) >= -0.025 - 1e-9
    assert int((weights.jdata > 0).sum()) > 0


@pytest.mark.parametrize("device", DEVICES)
def test_the_same_image_twice_doubles_the_weights_and_keeps_the_average(device):
    H, W = 20, 20
    K, pose = intrinsics(W, H)[None], look_at((0.0, 0.0, -2.5))[None]
    depths = sphere_depth(K[0], pose[0], W, H, 1.0)[None].to(device)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32, device=device)]),
                                 voxel_sizes=[[0.1] * 3])
    g1, t1, w1 = grid.integrate_tsdf(0.3, K, pose, *empty_state(grid, torch.float64, device), depths)
    g2, t2, w2 = g1.integrate_tsdf(0.3, K, pose, t1, w1, depths)
    assert g2.total_voxels == g1.total_voxels
    torch.testing.assert_close(t2.jdata, t1.jdata, atol=1e-12, rtol=0)
    torch.testing.assert_close(w2.jdata, 2 * w1.jdata, atol=0, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_sphere_seen_from_six_sides_fuses_to_its_sdf(device):
    radius, voxel, trunc = 1.0, 0.05, 0.15
    H = W = 96
    K = intrinsics(W, H, fov=0.9)
    eyes = [(3.0, 0, 0), (-3.0, 0, 0), (0, 3.0, 0), (0, -3.0, 0), (0, 0, 3.0), (0, 0, -3.0)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32, device=device)]),
                                 voxel_sizes=[[voxel] * 3])
    tsdf, weights = empty_state(grid, torch.float64, device)
    for eye in eyes:
        pose = look_at(eye)
        depth = sphere_depth(K, pose, W, H, radius)[None].to(device)
        grid, tsdf, weights = grid.integrate_tsdf(trunc, K[None], pose[None], tsdf, weights, depth)
    centres = grid.voxel_to_world(grid.ijk).jdata.double().cpu()
    true_sdf = centres.norm(dim=1) - radius
    seen = weights.jdata.cpu() > 0
    near = seen & (true_sdf.abs() < 0.5 * trunc)
    assert int(near.sum()) > 1000
    # Projective distances (along a view's z) overestimate the true one off the view axis, and
    # the six views' average keeps some of that: within a voxel on average, signs all right
    # where the true distance is over a voxel.
    err = (tsdf.jdata.cpu()[near] - true_sdf[near]).abs()
    assert float(err.mean()) < 0.75 * voxel, float(err.mean())
    signed = seen & (true_sdf.abs() > voxel) & (true_sdf.abs() < trunc)
    assert torch.equal(tsdf.jdata.cpu()[signed] > 0, true_sdf[signed] > 0)
    # Meshing the observed voxels gives the sphere.
    kept = grid.pruned_grid(weights.jdata > 0)
    rows = kept.ijk_to_index(grid.ijk, cumulative=True).jdata
    field = torch.zeros(kept.total_voxels, dtype=torch.float64, device=device)
    field[rows[rows >= 0]] = tsdf.jdata[rows >= 0]
    vertices, faces, _ = kept.marching_cubes(field)
    r = vertices.jdata.cpu().norm(dim=1)
    assert faces.jdata.shape[0] > 1000
    assert float((r - radius).abs().max()) < voxel
    assert float((r - radius).abs().mean()) < 0.2 * voxel


def test_bad_inputs_are_refused_before_anything_runs():
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(1, 3, dtype=torch.int32)]), voxel_sizes=[[0.1] * 3])
    K, pose = intrinsics(8, 8)[None], look_at((0.0, 0.0, -2.0))[None]
    depth = torch.ones(1, 8, 8, dtype=torch.float64)
    t, w = empty_state(grid, torch.float64, "cpu")
    with pytest.raises(ValueError, match="truncation_distance"):
        grid.integrate_tsdf(0.0, K, pose, t, w, depth)
    with pytest.raises(ValueError, match=r"depth_images must be float32 or float64 \[1, H, W\]"):
        grid.integrate_tsdf(0.1, K, pose, t, w, depth[0])
    with pytest.raises(ValueError, match=r"projection_matrices must be a float tensor \[1, 3, 3\]"):
        grid.integrate_tsdf(0.1, K[:, :2], pose, t, w, depth)
    bad = pose.clone()
    bad[0, 0, 0] = 2.0
    with pytest.raises(ValueError, match="rigid"):
        grid.integrate_tsdf(0.1, K, bad, t, w, depth)
    flat = K.clone()
    flat[0, 0, 0] = 0
    with pytest.raises(ValueError, match="focal"):
        grid.integrate_tsdf(0.1, flat, pose, t, w, depth)
    with pytest.raises(ValueError, match=r"tsdf must be \[1\] or \[1, 1\]"):
        grid.integrate_tsdf(0.1, K, pose, torch.zeros(2, dtype=torch.float64), w, depth)
    with pytest.raises(ValueError, match="weights must be torch.float64"):
        grid.integrate_tsdf(0.1, K, pose, t, w.float(), depth)
    with pytest.raises(ValueError, match="weight_images must match"):
        grid.integrate_tsdf(0.1, K, pose, t, w, depth, torch.ones(1, 8, 7, dtype=torch.float64))
    nan_pose = pose.clone()
    nan_pose[0, 0, 3] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        grid.integrate_tsdf(0.1, K, nan_pose, t, w, depth)
    assert torch.equal(t, torch.zeros(1, dtype=torch.float64)) and torch.equal(w, t)  # untouched


@requires_cuda
@pytest.mark.gpu
def test_gpu_fusion_equals_the_cpus():
    H = W = 64
    K = intrinsics(W, H)
    grids = {}
    for device in ("cpu", "cuda"):
        grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32, device=device)]),
                                     voxel_sizes=[[0.04] * 3])
        tsdf, weights = empty_state(grid, torch.float32, device)
        for eye in [(2.5, 0.3, 0.0), (0.0, 0.5, -2.5), (-1.5, 1.5, 1.5)]:
            pose = look_at(eye)
            depth = sphere_depth(K, pose, W, H, 0.8).float()[None].to(device)
            grid, tsdf, weights = grid.integrate_tsdf(0.12, K[None], pose[None], tsdf, weights, depth)
        grids[device] = (grid.ijk.jdata.cpu(), tsdf.jdata.cpu(), weights.jdata.cpu())
    assert torch.equal(grids["cpu"][0], grids["cuda"][0])
    torch.testing.assert_close(grids["cuda"][1], grids["cpu"][1], atol=1e-6, rtol=0)
    assert torch.equal(grids["cuda"][2], grids["cpu"][2])
