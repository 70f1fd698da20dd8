"""tilegrid.GridBatch: a batch of sparse voxel grids (index trees), in the spirit of fVDB.

Topology only: a grid maps each active voxel's integer coordinate (ijk) to a row of a
feature tensor; grid b's rows are [voxel_offsets[b], voxel_offsets[b+1]). Rows are ordered
per grid, leaf by leaf (docs in include/tilegrid/grid/index_tree.h).

Built and queried on the CPU for now; CUDA inputs raise an error that says so.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from . import _C
from .jagged_tensor import JaggedTensor


def _per_grid(values, n: int, name: str) -> list:
    if values is None:
        return []
    t = torch.as_tensor(values, dtype=torch.float64)
    if t.dim() == 1:
        t = t.expand(n, 3) if t.numel() == 3 else t.reshape(-1, 3)
    if t.shape != (n, 3):
        raise ValueError(f"GridBatch: {name} must be [3] or [{n}, 3], got {list(t.shape)}")
    return t.tolist()


def _capsules(j: JaggedTensor):
    return j.jdata.contiguous().__dlpack__(), j.joffsets.contiguous().__dlpack__()


def _jagged(capsules) -> JaggedTensor:
    jdata, joffsets = capsules
    return JaggedTensor.from_data_and_offsets(torch.from_dlpack(jdata), torch.from_dlpack(joffsets))


class GridBatch:
    def __init__(self, impl: "_C.GridBatch"):
        self._impl = impl

    @classmethod
    def from_ijk(
        cls,
        ijk: JaggedTensor,
        voxel_sizes: Optional[Sequence] = None,
        origins: Optional[Sequence] = None,
    ) -> "GridBatch":
        """One grid per tensor of `ijk` (int32 [N_b, 3] each); duplicates are merged and empty
        grids allowed. voxel_sizes / origins: [3] for all grids or [B, 3]; default 1 and 0."""
        if not isinstance(ijk, JaggedTensor):
            raise TypeError(f"GridBatch.from_ijk: ijk must be a JaggedTensor, got {type(ijk).__name__}")
        n = ijk.num_tensors
        jdata, joffsets = _capsules(ijk)
        impl = _C.GridBatch.from_ijk(
            jdata, joffsets, _per_grid(voxel_sizes, n, "voxel_sizes"), _per_grid(origins, n, "origins")
        )
        return cls(impl)

    @property
    def num_grids(self) -> int:
        return self._impl.num_grids

    @property
    def total_voxels(self) -> int:
        return self._impl.total_voxels

    def num_voxels(self, grid: int) -> int:
        return self._impl.num_voxels(grid)

    @property
    def voxel_offsets(self) -> torch.Tensor:
        """int64 [B+1]: the joffsets of this batch's feature tensors."""
        return torch.from_dlpack(self._impl.voxel_offsets())

    @property
    def voxel_sizes(self) -> torch.Tensor:
        return torch.tensor(self._impl.voxel_sizes, dtype=torch.float64)

    @property
    def origins(self) -> torch.Tensor:
        return torch.tensor(self._impl.origins, dtype=torch.float64)

    @property
    def tree_bytes(self) -> int:
        """Bytes of the topology (all nodes and offsets)."""
        return self._impl.tree_bytes

    @property
    def bytes_per_voxel(self) -> float:
        return self.tree_bytes / max(self.total_voxels, 1)

    def ijk(self) -> JaggedTensor:
        """Coordinates of the active voxels, in feature-row order (int32)."""
        return _jagged(self._impl.ijk())

    def ijk_to_index(self, ijk: JaggedTensor) -> JaggedTensor:
        """Feature row of each coordinate (int64), -1 where the voxel is not active."""
        if not isinstance(ijk, JaggedTensor):
            raise TypeError(f"GridBatch.ijk_to_index: ijk must be a JaggedTensor, got {type(ijk).__name__}")
        index = torch.from_dlpack(self._impl.ijk_to_index(*_capsules(ijk)))
        return ijk.jagged_like(index)

    def __repr__(self) -> str:
        return (
            f"GridBatch(num_grids={self.num_grids}, total_voxels={self.total_voxels}, "
            f"bytes_per_voxel={self.bytes_per_voxel:.2f})"
        )
