"""Serialization orders of a grid's voxels: Morton (Z-order) and Hilbert codes of their ijk,
for attention over voxels in patches of nearby voxels (tg.nn.SerializedAttention).

    codes = grid.morton()     # JaggedTensor of int64, one code a voxel, per grid
    codes = grid.hilbert()

Coordinates are taken relative to each grid's lowest active corner (so they are >= 0) and
must span fewer than 2^21 voxels an axis; a code holds 21 bits an axis (63 bits). Both are
computed with torch's integer ops on the grid's device (no tilegrid kernel).
"""

from __future__ import annotations

import torch

from .jagged_tensor import JaggedTensor

_BITS = 21


def _local_ijk(grid) -> JaggedTensor:
    ijk = grid.ijk
    data = ijk.jdata.long()
    if data.shape[0] == 0:
        return ijk.jagged_like(data)
    b = ijk.jidx.long()
    low = torch.full((grid.num_grids, 3), torch.iinfo(torch.int64).max, dtype=torch.int64, device=data.device)
    low = low.scatter_reduce(0, b[:, None].expand(-1, 3), data, reduce="amin")
    local = data - low[b]
    if int(local.max()) >= 1 << _BITS:
        raise ValueError(f"serialization: a grid spans {int(local.max()) + 1} voxels along an axis; "
                         f"at most {1 << _BITS} fit a 63-bit code")
    return ijk.jagged_like(local)


def morton(grid) -> JaggedTensor:
    """Z-order codes: bit b of i, j, k at bits 3b + 2, 3b + 1, 3b of the code."""
    ijk = _local_ijk(grid)
    x = ijk.jdata
    code = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
    for bit in range(_BITS):
        for axis in range(3):
            code |= ((x[:, axis] >> bit) & 1) << (3 * bit + 2 - axis)
    return ijk.jagged_like(code)


def hilbert(grid) -> JaggedTensor:
    """Hilbert-curve codes (Skilling's transform of the coordinates to the curve's transpose,
    then its bits interleaved as the Morton code's): consecutive codes of a full 2^n cube are
    neighbouring voxels."""
    ijk = _local_ijk(grid)
    x = [ijk.jdata[:, a].clone() for a in range(3)]
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
    return ijk.jagged_like(code)
