"""The torch-only baseline for sparse voxel grids that the grid benchmark compares against:
a grid is the sorted array of its voxels' linearized coordinates (int64 keys, 8 bytes a voxel),
built with torch.unique and queried with torch.searchsorted. This is what a user writes
without a sparse-grid library; every step is a stock torch GPU kernel.
"""

from __future__ import annotations

import torch

# Keys pack (i, j, k) with 21 bits each after an offset, so |coordinate| < 2^20.
_BITS = 21
_OFFSET = 1 << (_BITS - 1)


def keys_of(ijk: torch.Tensor) -> torch.Tensor:
    c = ijk.long() + _OFFSET
    return (c[:, 0] << (2 * _BITS)) | (c[:, 1] << _BITS) | c[:, 2]


def ijk_of(keys: torch.Tensor) -> torch.Tensor:
    mask = (1 << _BITS) - 1
    return torch.stack([keys >> (2 * _BITS), (keys >> _BITS) & mask, keys & mask], 1) - _OFFSET


class SortedVoxels:
    def __init__(self, keys: torch.Tensor, voxel_size: float, origin: float):
        self.keys, self.voxel_size, self.origin = keys, voxel_size, origin

    @classmethod
    def from_points(cls, points: torch.Tensor, voxel_size: float, origin: float = 0.0) -> "SortedVoxels":
        # float64 coordinate math and halves rounded away from zero (C's round), as tilegrid
        # does, so that both pick the same voxels; torch.round would round halves to even.
        u = (points.double() - origin) / voxel_size
        ijk = (torch.sign(u) * torch.floor(u.abs() + 0.5)).to(torch.int32)
        return cls(torch.unique(keys_of(ijk), sorted=True), voxel_size, origin)

    def ijk_to_index(self, ijk: torch.Tensor) -> torch.Tensor:
        """Row of each voxel in this grid's order, or -1."""
        q = keys_of(ijk)
        pos = torch.searchsorted(self.keys, q).clamp_max(self.keys.numel() - 1)
        return torch.where(self.keys[pos] == q, pos, -1)

    def _corners(self, points: torch.Tensor):
        """Rows (or -1) and trilinear weights of the 8 voxels around each point."""
        u = (points.double() - self.origin) / self.voxel_size
        base = torch.floor(u)
        frac = u - base
        base = base.to(torch.int32)
        rows, weights = [], []
        for c in range(8):
            bits = torch.tensor([(c >> 2) & 1, (c >> 1) & 1, c & 1], device=points.device)
            rows.append(self.ijk_to_index(base + bits.to(torch.int32)))
            weights.append(torch.where(bits.bool(), frac, 1 - frac).prod(1))
        return torch.stack(rows, 1), torch.stack(weights, 1)

    def sample_trilinear(self, points: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        rows, w = self._corners(points)
        w = torch.where(rows >= 0, w, 0).to(features.dtype)
        return (features[rows.clamp_min(0)] * w[..., None]).sum(1)

    def splat_trilinear(self, points: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        rows, w = self._corners(points)
        keep = rows >= 0
        out = values.new_zeros(self.keys.numel(), values.shape[1])
        contrib = values[:, None, :] * w.to(values.dtype)[..., None]
        return out.index_add_(0, rows[keep], contrib[keep])
