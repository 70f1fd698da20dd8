"""Features moved between grids, and between a grid and points, coordinates or dense volumes,
with fVDB's names and arguments: nearest-voxel sampling, the neighbourhood of coordinates,
injection from one grid into another (or from coordinates, or from and into dense volumes),
and the grids that union or clip others.

Each is torch tensor ops on voxel coordinates over GridBatch's lookups (ijk_to_index), so it
runs on the grids' device, CPU or CUDA, and is differentiable in the features wherever fVDB's
is. The GridBatch methods of the same names call these.
"""

from __future__ import annotations

import itertools
import operator

import torch

from .jagged_tensor import JaggedTensor
from .sparse_conv import vec3

# sample_nearest's corners of the cell around a point, in the order whose first wins a tie of
# distances (fVDB's: one coordinate changed from one corner to the next).
_CELL_CORNERS = torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 1], [0, 1, 0],
                              [1, 0, 0], [1, 0, 1], [1, 1, 1], [1, 1, 0]], dtype=torch.int64,
                             device="cpu")

# Voxel coordinates further out than this are in no grid (int32 coordinates); continuous
# coordinates are clamped to it before they are floored into int64.
_FAR = 2.0**40


def _rows(op: str, name: str, data, rows: int, device: torch.device) -> torch.Tensor:
    """`data` (a tensor or a JaggedTensor's jdata) checked to be [rows, ...] on `device`."""
    t = data.jdata if isinstance(data, JaggedTensor) else data
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] != rows:
        got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{op}: {name} must have {rows} rows (one a voxel), got {got}")
    if t.device.type != device.type or (device.type == "cuda" and t.device.index != device.index):
        raise ValueError(f"{op}: {name} is on {t.device} but the grid is on {device}")
    return t


def _jagged(op: str, name: str, value, grid) -> JaggedTensor:
    """`value` checked to be a JaggedTensor with one tensor a grid of `grid`."""
    if not isinstance(value, JaggedTensor):
        raise TypeError(f"{op}: {name} must be a JaggedTensor, got {type(value).__name__}")
    if value.num_tensors != grid.num_grids:
        raise ValueError(f"{op}: {name} holds {value.num_tensors} tensors but the grid batch has "
                         f"{grid.num_grids} grids")
    return value


def _nonneg_int(op: str, name: str, value) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__} ({value!r})") from None
    if value < 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {value}")
    return value


def _per_grid_ints(op: str, name: str, value, grid) -> torch.Tensor:
    """An int, three ints or [B, 3] ints as int64 [B, 3] on the grid's device."""
    t = torch.as_tensor(value, device="cpu")
    if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{op}: {name} must be ints, got {value!r}")
    t = t.to(torch.int64)
    if t.dim() == 0 or t.shape == (3,):
        t = t.expand(grid.num_grids, 3)
    if t.shape != (grid.num_grids, 3):
        raise ValueError(f"{op}: {name} must be an int, three ints or [{grid.num_grids}, 3] ints, "
                         f"got shape {list(t.shape)}")
    return t.to(grid.device)


def _repeat_jagged(j: JaggedTensor, data: torch.Tensor, times: int) -> JaggedTensor:
    """`data` ([rows of j x times, ...], `times` consecutive rows for each row of j) jagged as j
    with each tensor `times` as long."""
    return JaggedTensor._from_trusted(data, j.joffsets * times)


def sample_nearest(grid, points: JaggedTensor, voxel_data) -> JaggedTensor:
    """The features of the active voxel nearest each point among the 8 around it (the corners
    of its cell between voxel centres, as trilinear sampling reads them), zero where none of
    the 8 is active. Differentiable in voxel_data.

    Args:
        grid: The GridBatch.
        points: World points, a JaggedTensor with one [N_b, 3] tensor a grid.
        voxel_data: The voxels' features, [total_voxels, ...] (a tensor or a JaggedTensor).

    Returns:
        The features at the points, [N, ...] jagged like points. Of equally near active
        corners, the first of the order (0,0,0), (0,0,1), (0,1,1), (0,1,0), (1,0,0), (1,0,1),
        (1,1,1), (1,1,0) wins, as in fVDB.
    """
    op = "GridBatch.sample_nearest"
    points = _jagged(op, "points", points, grid)
    data = _rows(op, "voxel_data", voxel_data, grid.total_voxels, grid.device)
    p = points.jdata
    if not p.is_floating_point():
        raise TypeError(f"{op}: points must be floating point, got {p.dtype}")
    if not torch.compiler.is_compiling() and p.numel() and not bool(torch.isfinite(p).all()):
        bad = int((~torch.isfinite(p)).any(1).nonzero()[0, 0])
        raise ValueError(f"{op}: points must be finite, got {p[bad].tolist()} at point {bad}")
    b = points.jidx.long()
    sizes, origins = (t.to(p.device) for t in (grid.voxel_sizes, grid.origins))
    u = ((p.detach().double() - origins[b]) / sizes[b]).clamp(-_FAR, _FAR)
    cell = torch.floor(u)
    frac = u - cell
    corners = _CELL_CORNERS.to(p.device)
    ijk = cell.to(torch.int64)[:, None, :] + corners[None]  # [N, 8, 3]
    rows = grid.ijk_to_index(_repeat_jagged(points, ijk.reshape(-1, 3), 8), cumulative=True)
    rows = rows.jdata.reshape(-1, 8)
    distance = ((corners[None].double() - frac[:, None, :]) ** 2).sum(-1)
    distance = distance.masked_fill(rows < 0, float("inf"))
    nearest = rows.gather(1, distance.argmin(1, keepdim=True))[:, 0]  # -1 where none is active
    found = (nearest >= 0).nonzero()[:, 0]
    out = data.new_zeros(p.shape[0], *data.shape[1:])
    return points.jagged_like(out.index_put((found,), data[nearest[found]]))


def neighbor_indexes(grid, ijk: JaggedTensor, extent: int, bitshift: int = 0) -> JaggedTensor:
    """The rows of the voxels around each coordinate: for coordinate c (shifted left by
    bitshift bits) every c + (di, dj, dk) with each offset in [-extent, extent].

    Args:
        grid: The GridBatch.
        ijk: Integer coordinates, a JaggedTensor with one [N_b, 3] tensor a grid.
        extent: The neighbourhood's reach in voxels along each axis (>= 0).
        bitshift: Bits the coordinates are shifted left by first (>= 0; c * 2**bitshift).

    Returns:
        int64 [N, 2 * extent + 1, 2 * extent + 1, 2 * extent + 1] jagged like ijk: the row of
        voxel c + (di - extent, dj - extent, dk - extent) within its own grid (as fVDB's), -1
        where it is not active.
    """
    op = "GridBatch.neighbor_indexes"
    ijk = _jagged(op, "ijk", ijk, grid)
    extent = _nonneg_int(op, "extent", extent)
    bitshift = _nonneg_int(op, "bitshift", bitshift)
    data = ijk.jdata
    if data.is_floating_point() or data.dtype == torch.bool or data.dim() != 2 or data.shape[1] != 3:
        raise ValueError(f"{op}: ijk must be integer [N, 3] coordinates, got {data.dtype} "
                         f"{list(data.shape)}")
    _rows(op, "ijk", data, data.shape[0], grid.device)
    if bitshift > 31:
        raise ValueError(f"{op}: bitshift must be at most 31 (int32 coordinates), got {bitshift}")
    limit = torch.iinfo(torch.int32)
    if data.numel() and bool(((data < limit.min) | (data > limit.max)).any()):
        raise ValueError(f"{op}: ijk holds coordinates outside the int32 range")
    side = 2 * extent + 1
    if data.shape[0] * side**3 > 2**31 - 1:
        raise ValueError(f"{op}: {data.shape[0]} coordinates x {side}^3 neighbours would be "
                         f"{data.shape[0] * side**3} lookups, more than 2**31 - 1")
    shifts = torch.tensor(list(itertools.product(range(-extent, extent + 1), repeat=3)),
                          dtype=torch.int64, device=data.device)
    centre = data.long() * 2**bitshift  # beyond int32 when shifted: in no grid
    queries = (centre[:, None, :] + shifts[None]).reshape(-1, 3)
    rows = grid.ijk_to_index(_repeat_jagged(ijk, queries, side**3)).jdata
    return ijk.jagged_like(rows.reshape(-1, side, side, side))


def _destination(op: str, grid, src: torch.Tensor, dst, default_value) -> torch.Tensor:
    """inject's destination features: dst's (checked against the grid and src), or a new
    tensor of default_value."""
    if dst is None:
        return torch.full((grid.total_voxels, *src.shape[1:]), default_value, dtype=src.dtype,
                          device=src.device)
    out = _rows(op, "dst", dst, grid.total_voxels, grid.device)
    if out.shape[1:] != src.shape[1:]:
        raise ValueError(f"{op}: src and dst must have one element shape, got src "
                         f"{list(src.shape[1:])} and dst {list(out.shape[1:])}")
    if out.dtype != src.dtype:
        raise TypeError(f"{op}: src and dst must have one dtype, got {src.dtype} and {out.dtype}")
    if out.requires_grad and out.is_leaf:
        raise RuntimeError(f"{op}: dst is a leaf tensor that requires grad, which cannot be "
                           f"written in place; pass dst * 1 (or a detached dst)")
    return out


def _as_dst(grid, out: torch.Tensor, dst):
    """The written features as dst was given: a tensor for a tensor, else a JaggedTensor
    jagged as the grid's voxels."""
    return out if isinstance(dst, torch.Tensor) else JaggedTensor._from_trusted(out, grid.voxel_offsets)


def inject(dst_grid, src_grid, src, dst=None, default_value=0):
    """src_grid's features copied into dst_grid's voxels at the same coordinates (grid b of one
    batch into grid b of the other): dst_grid.inject_from(src_grid, ...) and
    src_grid.inject_to(dst_grid, ...). Differentiable in src and dst.

    Args:
        dst_grid: The GridBatch written.
        src_grid: The GridBatch read, with as many grids as dst_grid, on its device.
        src: src_grid's features, [src_grid.total_voxels, ...] (a tensor or a JaggedTensor).
        dst: dst_grid's features [dst_grid.total_voxels, ...], written in place where src_grid
            has the voxel (a non-leaf tensor if it requires grad); None (default): a new
            tensor filled with default_value.
        default_value: The value of dst_grid's voxels that src_grid lacks when dst is None.

    Returns:
        dst's features after the copy: a JaggedTensor jagged as dst_grid's voxels (a tensor if
        dst was one).
    """
    op = "GridBatch.inject_from"
    if dst_grid.num_grids != src_grid.num_grids:
        raise ValueError(f"{op}: the grid batches hold {dst_grid.num_grids} and "
                         f"{src_grid.num_grids} grids; injection pairs grid b with grid b")
    if dst_grid.device != src_grid.device:
        raise ValueError(f"{op}: the grids are on {dst_grid.device} and {src_grid.device}")
    values = _rows(op, "src", src, src_grid.total_voxels, src_grid.device)
    out = _destination(op, dst_grid, values, dst, default_value)
    rows = src_grid.ijk_to_index(dst_grid.ijk, cumulative=True).jdata
    # out[v] = values[rows[v]] for the voxels v of dst_grid that src_grid has.
    found = (rows >= 0).nonzero()[:, 0]
    out.index_put_((found,), values[rows[found]])
    return _as_dst(dst_grid, out, dst)


def inject_from_ijk(grid, src_ijk: JaggedTensor, src, dst=None, default_value=0):
    """Features given at coordinates copied into the grid's voxels there. Differentiable in src
    and dst.

    Args:
        grid: The GridBatch written.
        src_ijk: Integer coordinates, a JaggedTensor with one [N_b, 3] tensor a grid (each
            coordinate once; of repeated ones, which is copied is not defined).
        src: Their features, [N, ...] (a tensor or a JaggedTensor jagged like src_ijk).
        dst: The grid's features, written in place (as inject's); None (default): a new
            tensor filled with default_value.
        default_value: The value of voxels that src_ijk does not name, when dst is None.

    Returns:
        dst's features after the copy, a JaggedTensor jagged as the grid's voxels (a tensor if
        dst was one).
    """
    op = "GridBatch.inject_from_ijk"
    src_ijk = _jagged(op, "src_ijk", src_ijk, grid)
    values = _rows(op, "src", src, src_ijk.jdata.shape[0], grid.device)
    out = _destination(op, grid, values, dst, default_value)
    # out[rows[n]] = values[n] for the coordinates n that the grid has.
    rows = grid.ijk_to_index(src_ijk, cumulative=True).jdata
    found = (rows >= 0).nonzero()[:, 0]
    out.index_put_((rows[found],), values[found])
    return _as_dst(grid, out, dst)


def _dense_local(grid, origins: torch.Tensor):
    """(rows, b, local): the grid's voxels, their grid and their coordinates relative to the
    volume corner origins[b] (int64 [B, 3])."""
    ijk = grid.ijk
    b = ijk.jidx.long()
    return b, ijk.jdata.long() - origins[b]


def inject_to_dense(grid, sparse_data, min_coord=None, grid_size=None, channels_last=True):
    """The grid's features written into one dense volume a grid, zeros where no voxel is.
    Differentiable.

    Args:
        grid: The GridBatch.
        sparse_data: Its features, [total_voxels, *C] (a tensor or a JaggedTensor).
        min_coord: The voxel at the volumes' index (0, 0, 0): an int, three ints or [B, 3];
            default the lowest corner of the batch's bounding box (total_bbox).
        grid_size: The volumes' size, an int or three; default the extent of total_bbox
            (whatever min_coord is, as in fVDB).
        channels_last: True: [B, X, Y, Z, *C] (fVDB's _cminor); False: [B, *C, X, Y, Z]
            (_cmajor).

    Returns:
        The dense volumes.
    """
    op = "GridBatch.inject_to_dense_" + ("cminor" if channels_last else "cmajor")
    data = _rows(op, "sparse_data", sparse_data, grid.total_voxels, grid.device)
    box = grid.total_bbox.long()
    lo = box[0] if min_coord is None else min_coord
    origins = _per_grid_ints(op, "min_coord", lo, grid)
    if grid_size is None:
        size = (box[1] - box[0] + 1).tolist()
    else:
        size = list(vec3(f"{op}: grid_size", grid_size))
    b, local = _dense_local(grid, origins)
    inside = ((local >= 0) & (local < torch.tensor(size, device=local.device))).all(1)
    out = data.new_zeros(grid.num_grids, *size, *data.shape[1:])
    li = local[inside]
    out = out.index_put((b[inside], li[:, 0], li[:, 1], li[:, 2]), data[inside])
    return out if channels_last else out.movedim((1, 2, 3), (-3, -2, -1))


def inject_from_dense(grid, dense_data: torch.Tensor, dense_origins=0, channels_last=True):
    """The grid's features read from one dense volume a grid; voxels outside the volume get
    zeros. Differentiable.

    Args:
        grid: The GridBatch.
        dense_data: [B, X, Y, Z, *C] (channels_last, fVDB's _cminor) or [B, *C, X, Y, Z]
            (_cmajor), on the grid's device.
        dense_origins: The voxel at the volumes' index (0, 0, 0): an int or three ints (fVDB's
            default 0), or [B, 3].
        channels_last: Which of the two layouts dense_data has.

    Returns:
        [total_voxels, *C], a JaggedTensor jagged as the grid's voxels.
    """
    op = "GridBatch.inject_from_dense_" + ("cminor" if channels_last else "cmajor")
    if not isinstance(dense_data, torch.Tensor) or dense_data.dim() < 4 \
            or dense_data.shape[0] != grid.num_grids:
        got = list(dense_data.shape) if isinstance(dense_data, torch.Tensor) else type(dense_data).__name__
        layout = "[B, X, Y, Z, *C]" if channels_last else "[B, *C, X, Y, Z]"
        raise ValueError(f"{op}: dense_data must be {layout} with B = {grid.num_grids}, got {got}")
    _rows(op, "dense_data", dense_data, grid.num_grids, grid.device)
    dense = dense_data if channels_last else dense_data.movedim((-3, -2, -1), (1, 2, 3))
    origins = _per_grid_ints(op, "dense_origins", dense_origins, grid)
    b, local = _dense_local(grid, origins)
    inside = ((local >= 0) & (local < torch.tensor(dense.shape[1:4], device=local.device))).all(1)
    out = dense.new_zeros(grid.total_voxels, *dense.shape[4:])
    li, bi = local[inside], b[inside]
    out = out.index_put((inside.nonzero()[:, 0],), dense[bi, li[:, 0], li[:, 1], li[:, 2]])
    return JaggedTensor._from_trusted(out, grid.voxel_offsets)


def merged_grid(grid, other):
    """The union of two batches' voxels, grid b with grid b, with `grid`'s voxel sizes and
    origins (fVDB's merged_grid keeps the first batch's too).

    Args:
        grid: The first GridBatch.
        other: The second, with as many grids, on the same device.

    Returns:
        A GridBatch.
    """
    op = "GridBatch.merged_grid"
    if grid.num_grids != other.num_grids:
        raise ValueError(f"{op}: the grid batches hold {grid.num_grids} and {other.num_grids} grids")
    if grid.device != other.device:
        raise ValueError(f"{op}: the grids are on {grid.device} and {other.device}")
    a, b = grid.ijk, other.ijk
    which = torch.cat([a.jidx, b.jidx]).long()
    order = torch.sort(which, stable=True).indices
    counts = torch.bincount(which, minlength=grid.num_grids)
    joffsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    both = JaggedTensor._from_trusted(torch.cat([a.jdata, b.jdata])[order], joffsets)
    return type(grid).from_ijk(both, voxel_sizes=grid.voxel_sizes.tolist(),
                               origins=grid.origins.tolist())


def _in_box(op: str, grid, ijk_min, ijk_max) -> torch.Tensor:
    """bool [total_voxels]: whether each voxel lies in its grid's box [ijk_min, ijk_max]
    (inclusive)."""
    lo = _per_grid_ints(op, "ijk_min", ijk_min, grid)
    hi = _per_grid_ints(op, "ijk_max", ijk_max, grid)
    ijk = grid.ijk
    b = ijk.jidx.long()
    data = ijk.jdata.long()
    return ((data >= lo[b]) & (data <= hi[b])).all(1)


def clipped_grid(grid, ijk_min, ijk_max):
    """The voxels of each grid inside the box [ijk_min, ijk_max] (both corners included), in
    the grid's order.

    Args:
        grid: The GridBatch.
        ijk_min: The box's lowest voxel: an int, three ints or [B, 3] (one box a grid).
        ijk_max: Its highest voxel, likewise.

    Returns:
        A GridBatch with grid's voxel sizes and origins.
    """
    return grid.pruned_grid(_in_box("GridBatch.clipped_grid", grid, ijk_min, ijk_max))


def clip(grid, features, ijk_min, ijk_max):
    """clipped_grid with the features of the voxels kept. Differentiable in the features.

    Args:
        grid: The GridBatch.
        features: Its features, [total_voxels, ...] (a tensor or a JaggedTensor).
        ijk_min: The box's lowest voxel: an int, three ints or [B, 3] (one box a grid).
        ijk_max: Its highest voxel, likewise.

    Returns:
        (clipped features, clipped grid): the features a JaggedTensor jagged as the clipped
        grid's voxels.
    """
    op = "GridBatch.clip"
    data = _rows(op, "features", features, grid.total_voxels, grid.device)
    keep = _in_box(op, grid, ijk_min, ijk_max)
    clipped = grid.pruned_grid(keep)
    return JaggedTensor._from_trusted(data[keep], clipped.voxel_offsets), clipped


def dense_ijk(dims, low, mask, device: torch.device) -> torch.Tensor:
    """int32 [n, 3]: the box [low, low + dims)'s coordinates in C order (i slowest), those
    where mask (bool [X, Y, Z], or None for all) is set."""
    axes = [torch.arange(d, device=device, dtype=torch.int64) + lo for lo, d in zip(low, dims)]
    box = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3).to(torch.int32)
    return box if mask is None else box[mask.reshape(-1)]
