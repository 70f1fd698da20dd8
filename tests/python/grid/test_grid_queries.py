"""Cubes and rays against a GridBatch's active voxels (grid/queries.py, fVDB's names):
cubes_in_grid and cubes_intersect_grid against an explicit enumeration of the voxels each cube
covers (Python loops over a set of the active voxels), both of the module's ways of counting
(looking up a box's voxels, comparing the grid's voxels with a box) and its chunking;
rays_intersect_voxels against a dense march through an occupancy volume. Multi-grid batches
with an empty grid, cubes and rays far outside, on the CPU and, where there is one, the GPU."""

import itertools
import math

import pytest
import torch

import tilegrid as tg
import tilegrid.grid.queries as grid_queries
from conftest import DEVICES
from points_near_voxels import points_near_voxels

SIZES = ((0.5, 0.25, 1.0), (1.0, 1.0, 1.0), (2.0, 2.0, 2.0))


def random_grid(device, counts=(150, 0, 20), blocks=(5, 0, 3), spread=6):
    """Random voxels of [-spread, spread)^3 and a solid block of blocks[b]^3 voxels from
    (-1, -1, -1) in grid b, so that some cubes of several voxels lie wholly in active voxels."""
    ijk = []
    for n, side in zip(counts, blocks):
        solid = torch.stack(torch.meshgrid(*[torch.arange(side, dtype=torch.int32) - 1] * 3, indexing="ij"), -1)
        scattered = torch.randint(-spread, spread, (n, 3), dtype=torch.int32)
        ijk.append(torch.unique(torch.cat([solid.reshape(-1, 3), scattered]), dim=0))
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk), voxel_sizes=[list(s) for s in SIZES[:len(counts)]],
                                 origins=torch.randn(len(counts), 3).tolist())
    return grid.to(device)


def active_set(grid) -> set:
    """{(grid, i, j, k)} of every active voxel."""
    return {(b, *c) for b, c in zip(grid.jidx.cpu().tolist(), grid.ijk.jdata.cpu().tolist())}


def centres_near_voxels(grid, counts=(150, 10, 60)):
    """float64 world points within two voxels of random active voxels of each grid, and two far
    from every voxel, a tensor per grid."""
    far = torch.tensor([[1e4, 0, 0], [-3e3, 5e3, 1e2]], dtype=torch.float64)
    return points_near_voxels(grid, counts, spread=2, empty_scale=3, far=far)


def reference_cubes(grid, active, centres, cube_min, cube_max):
    """(inside, touching) per cube: every / some voxel of its box is active, the box running
    from the voxel nearest its lowest corner to the voxel nearest its highest (a coordinate
    u + 1/2 rounded down, as NanoVDB rounds), both included."""
    inside, touching = [], []
    for b, c in zip(centres.jidx.cpu().tolist(), centres.jdata.cpu().tolist()):
        box = []
        for a in range(3):
            o, s = float(grid.origins[b, a]), float(grid.voxel_sizes[b, a])
            lo = math.floor((c[a] + cube_min[a] - o) / s + 0.5)
            hi = math.floor((c[a] + cube_max[a] - o) / s + 0.5)
            box.append(range(lo, hi + 1))
        if math.prod(len(r) for r in box) > 10**5:  # far cubes of a huge box: their grid's voxels
            found = [v for v in active if v[0] == b and all(v[1 + a] in box[a] for a in range(3))]
            inside.append(False)
            touching.append(bool(found))
            continue
        states = [(b, *v) in active for v in itertools.product(*box)]
        inside.append(all(states))
        touching.append(any(states))
    return torch.tensor(inside, dtype=torch.bool), torch.tensor(touching, dtype=torch.bool)


# (cube_min, cube_max) in world units: numbers or triples.
OFFSETS = [
    (0, 0),  # fVDB's default: the centre's voxel
    ((-0.3, -0.2, -0.6), (0.3, 0.2, 0.6)),  # about half a voxel of grid 0
    ((-0.6, -0.1, -1.7), (0.4, 0.9, 0.2)),  # lopsided
    (0.2, 0.9),  # not around the centre
    (-1.5, 1.5),  # several voxels
    (-3.0, 3.0),  # more voxels than grid 2 holds: its cubes compare the grid's voxels
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offsets", OFFSETS, ids=[f"offsets{i}" for i in range(len(OFFSETS))])
@pytest.mark.parametrize("chunk", [None, 7], ids=["whole", "chunked"])
def test_cubes_match_an_enumeration_of_their_voxels(device, offsets, chunk, monkeypatch):
    if chunk is not None:
        monkeypatch.setattr(grid_queries, "_CHUNK", chunk)
    grid = random_grid(device)
    active = active_set(grid)
    centres = tg.JaggedTensor(centres_near_voxels(grid)).to(device)
    cube_min, cube_max = offsets
    inside = grid.cubes_in_grid(centres, cube_min, cube_max)
    touching = grid.cubes_intersect_grid(centres, cube_min, cube_max)
    triple = [x if isinstance(x, tuple) else (x,) * 3 for x in offsets]
    want_inside, want_touching = reference_cubes(grid, active, centres, *triple)
    for got in (inside, touching):
        assert got.jdata.dtype == torch.bool and got.jdata.shape == (centres.jdata.shape[0],)
        assert got.jdata.device.type == device and torch.equal(got.joffsets.cpu(), centres.joffsets.cpu())
    assert torch.equal(inside.jdata.cpu(), want_inside)
    assert torch.equal(touching.jdata.cpu(), want_touching)
    assert not (want_inside & ~want_touching).any()
    assert want_touching.any()  # the cubes are near active voxels
    if offsets in OFFSETS[:4]:  # cubes of up to a few voxels: some lie in the solid blocks
        assert want_inside.any()
    if offsets == (0, 0):  # a cube of no size is its centre's voxel, as points_in_grid's
        assert want_inside.any()
        assert torch.equal(inside.jdata, touching.jdata)


@pytest.mark.parametrize("device", DEVICES)
def test_cube_corners_on_voxel_faces_take_the_upper_voxel(device):
    """fVDB's rounding (NanoVDB's floor(u + 1/2)): a cube exactly one voxel wide, centred on
    voxel 0, reaches voxel 1; one a little narrower does not."""
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[0, 0, 0]], dtype=torch.int32)]),
                                 voxel_sizes=0.5, origins=[1.0, 1.0, 1.0]).to(device)
    centre = tg.JaggedTensor([torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)]).to(device)

    def inside(lo, hi, at=centre):
        return grid.cubes_in_grid(at, lo, hi).jdata.item()

    assert not inside(-0.25, 0.25)  # u from -0.5 to 0.5: voxels 0 to 1, and 1 is not active
    assert inside(-0.25, 0.2499)  # -0.5 is on the face: voxel 0
    assert not inside(-0.2501, 0.2499)  # just below it: voxel -1
    assert inside(torch.tensor([-0.2, -0.2, -0.2]), [0.1, 0.1, 0.1])
    assert grid.cubes_intersect_grid(centre, -0.25, 0.25).jdata.item()
    beside = centre + 0.4  # in voxel 1
    assert not grid.cubes_intersect_grid(beside, 0, 0).jdata.item()
    assert grid.cubes_intersect_grid(beside, -0.2, 0).jdata.item()  # reaches u = 0.4: voxel 0


@pytest.mark.parametrize("device", DEVICES)
def test_cubes_of_an_empty_batch_and_no_cubes(device):
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32)] * 2)).to(device)
    centres = tg.JaggedTensor([torch.zeros(3, 3, device=device), torch.ones(1, 3, device=device)])
    assert not empty.cubes_in_grid(centres, -1, 1).jdata.any()
    assert not empty.cubes_intersect_grid(centres, -10, 10).jdata.any()
    grid = random_grid(device)
    none = tg.JaggedTensor([torch.zeros(0, 3, device=device)] * 3)
    assert grid.cubes_in_grid(none).jdata.shape == (0,)
    assert grid.cubes_intersect_grid(none, -2, 2).jdata.shape == (0,)


def test_bad_cubes_are_refused():
    grid = random_grid("cpu")
    centres = tg.JaggedTensor([torch.zeros(2, 3), torch.zeros(1, 3), torch.zeros(0, 3)])
    for name in ("cubes_in_grid", "cubes_intersect_grid"):
        fn = getattr(grid, name)
        with pytest.raises(TypeError, match=f"GridBatch.{name}: cube_centers must be a JaggedTensor, got Tensor"):
            fn(torch.zeros(2, 3))
        with pytest.raises(ValueError, match="cube_centers holds 1 tensors but the grid batch has 3 grids"):
            fn(tg.JaggedTensor([torch.zeros(2, 3)]))
        with pytest.raises(TypeError, match="cube_centers must be floating point, got torch.int32"):
            fn(tg.JaggedTensor([torch.zeros(2, 3, dtype=torch.int32)] * 3))
        with pytest.raises(ValueError, match=r"cube_centers must be \[N, 3\], got \[3, 4\]"):
            fn(tg.JaggedTensor([torch.zeros(1, 4)] * 3))
        with pytest.raises(ValueError, match=r"cube_centers must be finite, got \[inf, 0.0, 0.0\] at row 1"):
            fn(tg.JaggedTensor([torch.tensor([[0.0, 0, 0], [float("inf"), 0, 0]]), torch.zeros(0, 3),
                                torch.zeros(0, 3)]))
        with pytest.raises(ValueError, match="cube_centers is on meta but the grid is on cpu"):
            fn(centres.to("meta"))
        with pytest.raises(ValueError, match=r"cube_min must be <= cube_max along every axis, got cube_min "
                                             r"\[0.0, 1.0, 0.0\] and cube_max \[0.5, 0.5, 0.5\]"):
            fn(centres, [0, 1, 0], 0.5)
        with pytest.raises(ValueError, match=r"cube_max must be a number or three numbers, got \[1, 2\]"):
            fn(centres, 0, [1, 2])
        with pytest.raises(TypeError, match="cube_min must be a number or three numbers, got 'a'"):
            fn(centres, "a")
        with pytest.raises(ValueError, match="cube_max must be finite, got nan"):
            fn(centres, 0, float("nan"))


def march_reference(grid, origins, directions, step=2e-3):
    """Whether each ray crosses an active voxel: points every `step` voxels along the ray
    (t >= 0, through its grid's bounding box) looked up in a dense occupancy volume. Also the
    longest stretch of the ray (in voxels) inside one active voxel, from the slabs of every
    voxel, to tell rays that only graze a voxel (which a march may step over)."""
    hits, longest = [], []
    voxels = [[] for _ in range(grid.num_grids)]
    for b, c in zip(grid.jidx.cpu().tolist(), grid.ijk.jdata.cpu().tolist()):
        voxels[b].append(c)
    for b, o, d in zip(origins.jidx.cpu().tolist(), origins.jdata.cpu().double(), directions.jdata.cpu().double()):
        if not voxels[b]:
            hits.append(False)
            longest.append(0.0)
            continue
        o = (o - grid.origins[b]) / grid.voxel_sizes[b]  # voxel units: centres at integers
        d = d / grid.voxel_sizes[b]
        ijk = torch.tensor(voxels[b], dtype=torch.float64)
        low, high = ijk.min(0).values - 0.5, ijk.max(0).values + 0.5
        occupancy = torch.zeros(*(high - low).long().tolist(), dtype=torch.bool)
        index = (ijk - low - 0.5).long()
        occupancy[index[:, 0], index[:, 1], index[:, 2]] = True
        # The ray's span through the bounding box, t >= 0.
        with torch.no_grad():
            safe = torch.where(d == 0, torch.full_like(d, 1e-300), d)
            t1, t2 = (low - o) / safe, (high - o) / safe
            enter = torch.where(d == 0, torch.where((o > low) & (o < high), -math.inf, math.inf),
                                torch.minimum(t1, t2)).max().clamp(min=0)
            leave = torch.where(d == 0, torch.where((o > low) & (o < high), math.inf, -math.inf),
                                torch.maximum(t1, t2)).min()
        speed = float(d.norm())
        if leave <= enter or speed == 0:
            inside = bool((o > low).all() and (o < high).all())
            cell = (o - low).long() if inside else None
            hit = inside and bool(occupancy[tuple(cell.tolist())])
            hits.append(hit)
            longest.append(math.inf if hit else 0.0)
            continue
        t = torch.arange(float(enter), float(leave), step / speed, dtype=torch.float64)
        cells = torch.floor(o + t[:, None] * d - low).long()
        ok = ((cells >= 0) & (cells < torch.tensor(occupancy.shape))).all(1)
        cells = cells[ok]
        hits.append(bool(occupancy[cells[:, 0], cells[:, 1], cells[:, 2]].any()))
        # Slabs: each active voxel's [v - 1/2, v + 1/2] crossed for t in [enter, leave] (t >= 0).
        t1, t2 = (ijk - 0.5 - o) / safe, (ijk + 0.5 - o) / safe
        flat = d == 0
        t_in = torch.where(flat, torch.where((o > ijk - 0.5) & (o < ijk + 0.5), -math.inf, math.inf),
                           torch.minimum(t1, t2)).max(1).values.clamp(min=0)
        t_out = torch.where(flat, torch.where((o > ijk - 0.5) & (o < ijk + 0.5), math.inf, -math.inf),
                            torch.maximum(t1, t2)).min(1).values
        longest.append(float(((t_out - t_in).clamp(min=0) * speed).max()))
    return torch.tensor(hits), torch.tensor(longest, dtype=torch.float64)


def random_rays(grid, counts=(150, 10, 60)):
    """Rays from around each grid: towards random active voxels, in random directions, pointing
    away from the grid, of zero direction, a tensor per grid (origins, directions)."""
    centres = grid.voxel_to_world(grid.ijk).jdata.cpu().double()
    origins, directions = [], []
    for b, n in enumerate(counts):
        mine = centres[grid.joffsets[b]:grid.joffsets[b + 1]]
        o = torch.randn(n, 3, dtype=torch.float64) * 6 * grid.voxel_sizes[b]
        if len(mine):
            o = o + mine.mean(0)
            target = mine[torch.randint(0, len(mine), (n,))] + torch.rand(n, 3, dtype=torch.float64) * 0.2
            d = target - o
            d[: n // 3] = torch.randn(n // 3, 3, dtype=torch.float64)  # random directions
            d[n // 3: n // 3 + 5] = o[n // 3: n // 3 + 5] - mine.mean(0)  # away from the grid
        else:
            d = torch.randn(n, 3, dtype=torch.float64)
        d[-3:] = 0  # zero directions: a hit where the origin is in an active voxel
        d = d * torch.rand(n, 1, dtype=torch.float64) * 3  # not unit length
        origins.append(o)
        directions.append(d)
    return tg.JaggedTensor(origins), tg.JaggedTensor(directions)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rays_match_a_dense_march(device, dtype):
    grid = random_grid(device)
    origins, directions = random_rays(grid)
    origins, directions = origins.to(dtype), directions.to(dtype)
    hit = grid.rays_intersect_voxels(origins.to(device), directions.to(device))
    assert hit.jdata.dtype == torch.bool and hit.jdata.shape == (origins.jdata.shape[0],)
    assert hit.jdata.device.type == device and torch.equal(hit.joffsets.cpu(), origins.joffsets.cpu())
    want, longest = march_reference(grid, origins, directions)
    clear = (longest == 0) | (longest > 0.05)  # rays that do not just graze a voxel
    assert clear.sum() >= len(clear) - 5
    assert torch.equal(hit.jdata.cpu()[clear], want[clear])
    assert want[clear].sum() > 60 and (~want[clear]).sum() > 30  # hits and misses both
    voxels, _ = grid.voxels_along_rays(origins.to(device), directions.to(device), max_voxels=1)
    assert torch.equal(hit.jdata.cpu(), voxels.joffsets.diff().cpu() > 0)


@pytest.mark.parametrize("device", DEVICES)
def test_rays_eps_leaves_out_short_crossings(device):
    """Along +x from inside voxel 0 (at x = 0.2), voxel 0 is crossed over t in [0, 0.3] and
    voxel 3 over [2.3, 3.3]: eps 0.25 keeps voxel 0, eps 0.5 only voxel 3, eps 2 none; a
    direction twice as long halves the t of every crossing."""
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[0, 0, 0], [3, 0, 0]], dtype=torch.int32)])).to(device)
    o = torch.tensor([[0.2, 0.0, 0.0]] * 2, dtype=torch.float64, device=device)
    d = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]], dtype=torch.float64, device=device)
    only_3 = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor([[3, 0, 0]], dtype=torch.int32)])).to(device)
    assert grid.rays_intersect_voxels(o, d).jdata.tolist() == [True, True]  # a plain tensor: one grid
    assert grid.rays_intersect_voxels(o, d, eps=0.25).jdata.tolist() == [True, True]
    assert only_3.rays_intersect_voxels(o, d, eps=0.75).jdata.tolist() == [True, False]
    assert grid.rays_intersect_voxels(o, d, 2.0).jdata.tolist() == [False, False]
    assert grid.rays_intersect_voxels(o, -d).jdata.tolist() == [True, True]  # starts inside voxel 0
    assert only_3.rays_intersect_voxels(o, -d).jdata.tolist() == [False, False]


@pytest.mark.parametrize("device", DEVICES)
def test_rays_of_an_empty_grid_and_no_rays(device):
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32)] * 2)).to(device)
    origins = tg.JaggedTensor([torch.zeros(3, 3, device=device), torch.ones(1, 3, device=device)])
    assert not empty.rays_intersect_voxels(origins, origins + 1).jdata.any()
    grid = random_grid(device)
    none = tg.JaggedTensor([torch.zeros(0, 3, device=device)] * 3)
    assert grid.rays_intersect_voxels(none, none).jdata.shape == (0,)


def test_bad_rays_are_refused():
    grid = random_grid("cpu")
    rays = tg.JaggedTensor([torch.zeros(2, 3), torch.zeros(1, 3), torch.zeros(0, 3)])
    fn = grid.rays_intersect_voxels
    with pytest.raises(TypeError, match="ray_origins must be a JaggedTensor .* for a batch of 3 grids"):
        fn(torch.zeros(2, 3), rays)
    with pytest.raises(TypeError, match="ray_directions must be a JaggedTensor, got list"):
        fn(rays, [[0, 0, 1]])
    with pytest.raises(ValueError, match="ray_origins holds 1 tensors but the grid batch has 3 grids"):
        fn(tg.JaggedTensor([torch.zeros(2, 3)]), rays)
    with pytest.raises(TypeError, match="ray_directions must be floating point, got torch.int64"):
        fn(rays, tg.JaggedTensor([torch.zeros(2, 3, dtype=torch.int64), torch.zeros(1, 3, dtype=torch.int64),
                                  torch.zeros(0, 3, dtype=torch.int64)]))
    with pytest.raises(ValueError, match=r"ray_origins must be finite, got \[0.0, nan, 0.0\] at row 0"):
        fn(tg.JaggedTensor([torch.tensor([[0, float("nan"), 0]]), torch.zeros(0, 3), torch.zeros(0, 3)]),
           tg.JaggedTensor([torch.ones(1, 3), torch.zeros(0, 3), torch.zeros(0, 3)]))
    with pytest.raises(ValueError, match=r"must be jagged alike .* got rays per grid \[2, 1, 0\] and \[1, 1, 1\]"):
        fn(rays, tg.JaggedTensor([torch.ones(1, 3)] * 3))
    with pytest.raises(TypeError, match="must have one dtype, got torch.float32 and torch.float64"):
        fn(rays, rays.to(torch.float64))
    with pytest.raises(ValueError, match="ray_directions is on meta but the grid is on cpu"):
        fn(rays, rays.to("meta"))
    with pytest.raises(ValueError, match="eps must be a finite number >= 0, got -1.0"):
        fn(rays, rays, eps=-1.0)
    with pytest.raises(TypeError, match="eps must be a number, got 'x'"):
        fn(rays, rays, eps="x")
