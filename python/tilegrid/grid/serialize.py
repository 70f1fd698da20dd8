"""Serialization orders of a grid's voxels: Morton (Z-order) and Hilbert codes of their ijk,
for attention over voxels in patches of nearby voxels (tg.nn.SerializedAttention).

    codes = grid.morton()     # JaggedTensor of int64, one code a voxel, per grid
    codes = grid.hilbert()
    codes = grid.morton_zyx(offset=(64, 64, 64))   # fVDB's forms

Coordinates are taken relative to each grid's lowest active corner (so they are >= 0), or
shifted by a given offset (fVDB's argument), and must then lie in [0, 2^21) on every axis; a
code holds 21 bits an axis (63 bits), i's in the highest bit of each triple, or k's for the
transposed (zyx) codes. Computed with torch's integer ops on the grid's device (no tilegrid
kernel).
"""

from __future__ import annotations

import torch

from .jagged_tensor import JaggedTensor

_BITS = 21


def _local_ijk(grid, offset=None, zyx: bool = False) -> JaggedTensor:
    """The voxels' coordinates to encode: relative to each grid's lowest corner, or shifted by
    `offset` (three ints); axes reversed (k, j, i) for the transposed codes."""
    ijk = grid.ijk
    data = ijk.jdata.long()
    if offset is not None:
        shift = torch.as_tensor(offset, device="cpu")
        if shift.is_floating_point() or shift.numel() not in (1, 3) or shift.dim() > 1:
            raise ValueError(f"serialization: offset must be an int or three ints, got {offset!r}")
        local = data + shift.to(torch.int64).to(data.device).expand(3)
        if local.shape[0] and (int(local.min()) < 0 or int(local.max()) >= 1 << _BITS):
            raise ValueError(f"serialization: ijk + offset must lie in [0, {1 << _BITS}) on every axis, got "
                             f"[{int(local.min())}, {int(local.max())}]")
    elif data.shape[0] == 0:
        local = data
    else:
        b = ijk.jidx.long()
        low = torch.full((grid.num_grids, 3), torch.iinfo(torch.int64).max, dtype=torch.int64,
                         device=data.device)
        low = low.scatter_reduce(0, b[:, None].expand(-1, 3), data, reduce="amin")
        local = data - low[b]
        if int(local.max()) >= 1 << _BITS:
            raise ValueError(f"serialization: a grid spans {int(local.max()) + 1} voxels along an axis; "
                             f"at most {1 << _BITS} fit a 63-bit code")
    if zyx:
        local = local.flip(1)
    return ijk.jagged_like(local)


def _coordinates(op: str, ijk) -> torch.Tensor:
    """ijk as int64 [N, 3], each coordinate in [0, 2^21) (raises otherwise)."""
    if not isinstance(ijk, torch.Tensor) or ijk.is_floating_point() or ijk.dtype == torch.bool \
            or ijk.dim() != 2 or ijk.shape[1] != 3:
        got = f"{ijk.dtype} of shape {list(ijk.shape)}" if isinstance(ijk, torch.Tensor) else type(ijk).__name__
        raise ValueError(f"{op}: ijk must be an integer tensor [N, 3], got {got}")
    x = ijk.long()
    if x.shape[0] and (int(x.min()) < 0 or int(x.max()) >= 1 << _BITS):
        raise ValueError(f"{op}: coordinates must lie in [0, {1 << _BITS}) (21 bits an axis), got "
                         f"[{int(x.min())}, {int(x.max())}]")
    return x


def morton_codes(ijk: torch.Tensor) -> torch.Tensor:
    """Z-order codes (int64 [N]) of non-negative coordinates ijk [N, 3]: bit b of i, j, k at
    bits 3b + 2, 3b + 1, 3b of the code (fVDB's morton).

    Args:
        ijk: Integer [N, 3], each coordinate in [0, 2^21).
    """
    return _morton(_coordinates("morton", ijk))


def _morton(x: torch.Tensor) -> torch.Tensor:
    """morton_codes of coordinates already checked (int64 [N, 3] in range)."""
    code = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
    for bit in range(_BITS):
        for axis in range(3):
            code |= ((x[:, axis] >> bit) & 1) << (3 * bit + 2 - axis)
    return code


def morton(grid, offset=None, zyx: bool = False) -> JaggedTensor:
    """The Z-order codes of a grid's voxels (k, j, i order with zyx)."""
    ijk = _local_ijk(grid, offset, zyx)
    return ijk.jagged_like(_morton(ijk.jdata))  # checked by _local_ijk


def hilbert(grid, offset=None, zyx: bool = False) -> JaggedTensor:
    """The Hilbert-curve codes of a grid's voxels (k, j, i order with zyx)."""
    ijk = _local_ijk(grid, offset, zyx)
    return ijk.jagged_like(_hilbert(ijk.jdata))  # checked by _local_ijk


def hilbert_codes(ijk: torch.Tensor) -> torch.Tensor:
    """Hilbert-curve codes (int64 [N]) of non-negative coordinates ijk [N, 3] (fVDB's hilbert):
    Skilling's transform of the coordinates to the curve's transpose, then its bits
    interleaved as the Morton code's; consecutive codes of a full 2^n cube are neighbouring
    voxels.

    Args:
        ijk: Integer [N, 3], each coordinate in [0, 2^21).
    """
    return _hilbert(_coordinates("hilbert", ijk))


def _hilbert(data: torch.Tensor) -> torch.Tensor:
    """hilbert_codes of coordinates already checked (int64 [N, 3] in range)."""
    x = [data[:, a].clone() for a in range(3)]
    # Inverse undo of excess work (Skilling 2004, "Programming the Hilbert curve").
    m = 1 << (_BITS - 1)
    q = m
    while q > 1:
        p = q - 1
        for i in range(3):
            hit = (x[i] & q) != 0
            x[0] = torch.where(hit, x[0] ^ p, x[0])
            t = (x[0] ^ x[i]) & p
            x[0] = torch.where(hit, x[0], x[0] ^ t)
            x[i] = torch.where(hit, x[i], x[i] ^ t)
        q >>= 1
    # Gray encode.
    for i in range(1, 3):
        x[i] = x[i] ^ x[i - 1]
    t = torch.zeros_like(x[0])
    q = m
    while q > 1:
        t = torch.where((x[2] & q) != 0, t ^ (q - 1), t)
        q >>= 1
    x = [xi ^ t for xi in x]
    code = torch.zeros_like(x[0])
    for bit in range(_BITS):
        for axis in range(3):
            code |= ((x[axis] >> bit) & 1) << (3 * bit + 2 - axis)
    return code
