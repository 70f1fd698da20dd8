"""tilegrid.GridBatch: a batch of sparse voxel grids (index trees), in the spirit of fVDB.

Topology only: a grid maps each active voxel's integer coordinate (ijk) to a row of a
feature tensor; grid b's rows are [voxel_offsets[b], voxel_offsets[b+1]). Rows are ordered
per grid, leaf by leaf (docs in include/tilegrid/grid/index_tree.h).

from_ijk, from_points, from_nearest_voxels_to_points, from_mesh and from_dense build on the
device of their inputs (in parallel on a GPU), and so do the derived grids. A batch moves
between devices with .to() / .cuda() / .cpu(); on a GPU, lookups, ijk and trilinear
sampling and splatting run as CUDA kernels.
"""

from __future__ import annotations

import math
import operator
from typing import Optional, Sequence

import torch

from .. import _C, _deprecation
from . import derived, indexing, pooling, rays, sampling, serialize, transfer
from . import tsdf as _tsdf  # as _tsdf: integrate_tsdf has an argument named tsdf
from .._torch import current_stream, dlpack_pair
from .jagged_tensor import JaggedTensor, _batch_index, jcat_jagged
from .sparse_conv import vec3


def _per_grid(values, n: int, name: str) -> list:
    if values is None:
        return []
    try:
        t = torch.as_tensor(values, dtype=torch.float64, device="cpu")
    except (TypeError, ValueError, RuntimeError, OverflowError):
        # torch's messages here (e.g. "Could not infer dtype of str", "int too large to
        # convert to float") do not say which argument; a list that is not a grid of numbers
        # gets one error type.
        raise TypeError(f"GridBatch: {name} must be a number, three numbers or [{n}, 3] "
                        f"numbers, got {values!r}") from None
    if t.dim() == 0:  # one number for every axis of every grid, as fVDB takes it
        t = t.expand(n, 3)
    elif t.dim() == 1 and t.numel() == 3:
        t = t.expand(n, 3)
    if t.shape != (n, 3):
        raise ValueError(f"GridBatch: {name} must be [3] or [{n}, 3], got {list(t.shape)}")
    return t.tolist()


def _int_arg(op: str, name: str, value) -> int:
    """value as a Python int (Python, numpy or torch integers; not bools or floats)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__} "
                        f"({value!r})") from None


def _ints3(op: str, name: str, value) -> list[int]:
    """An int or three ints of any sign (a box corner); one int stands for all three axes."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}: {name} must be three ints, got {value!r}")
    if not hasattr(value, "__iter__"):
        return [_int_arg(op, name, value)] * 3
    out = [_int_arg(op, name, v) for v in value]
    if len(out) != 3:
        raise ValueError(f"{op}: {name} must be three ints, got {value!r}")
    return out


def _int32_ijk(op: str, ijk: JaggedTensor) -> JaggedTensor:
    """int32 coordinates: int64 ones converted when every value fits, else a ValueError; other
    dtypes a TypeError (int16 or int8 would otherwise fail in the DLPack conversion, which
    names no argument)."""
    data = ijk.jdata
    if data.dtype not in (torch.int32, torch.int64):
        got = str(data.dtype).removeprefix("torch.")
        raise TypeError(f"{op}: ijk must be int32, got {got} (int64 is taken when its values fit int32)")
    if data.dtype == torch.int64:
        limit = torch.iinfo(torch.int32)
        if data.numel() and bool(((data < limit.min) | (data > limit.max)).any()):
            raise ValueError(f"{op}: ijk holds coordinates outside the int32 range")
        return ijk.jagged_like(data.to(torch.int32))
    return ijk


def jcat(things: Sequence, dim: Optional[int] = None):
    """fVDB's jcat: concatenates GridBatches or JaggedTensors (not a mix).

    Args:
        things: The GridBatches, or the JaggedTensors, in order (at least one).
        dim: For GridBatches, None only: one batch holding the grids of every batch in order,
            their feature rows in order too. For JaggedTensors, None puts the batches one
            after another (their tensors in order); k concatenates the i-th tensors of every
            batch along dimension k of each tensor (k=0: their rows; the batches must hold
            equally many tensors).

    Returns:
        A GridBatch or a JaggedTensor.
    """
    things = list(things)
    if not things:
        raise ValueError("jcat: expected at least one GridBatch or JaggedTensor")
    if all(isinstance(t, JaggedTensor) for t in things):
        return jcat_jagged(things, dim)
    if not all(isinstance(t, GridBatch) for t in things):
        raise TypeError(f"jcat: expected GridBatches or JaggedTensors (not mixed), got "
                        f"{sorted({type(t).__name__ for t in things})}")
    if dim is not None:
        raise ValueError(f"jcat: GridBatches concatenate as batches only (dim=None), got dim={dim}")
    grids = things
    parts = [t for g in grids for t in g.ijk.unbind()]
    sizes = torch.cat([g.voxel_sizes for g in grids]).tolist()
    origins = torch.cat([g.origins for g in grids]).tolist()
    return GridBatch.from_ijk(JaggedTensor(parts), voxel_sizes=sizes, origins=origins)


def gcat(grids: Sequence["GridBatch"]) -> "GridBatch":
    """fVDB's gcat: one batch holding the grids of every batch in `grids`, in order (as jcat
    and GridBatch.from_cat).

    Args:
        grids: The GridBatches (at least one).
    """
    return indexing.concatenated(grids)


def _pool_stride(stride):
    """A pooling stride, None where it is fVDB's 0 (or None): the pool factor."""
    if stride is None or (isinstance(stride, int) and not isinstance(stride, bool) and stride == 0):
        return None
    return stride


def _jagged_arg(op: str, name: str, value) -> JaggedTensor:
    if not isinstance(value, JaggedTensor):
        raise TypeError(f"GridBatch.{op}: {name} must be a JaggedTensor, got {type(value).__name__}")
    return value


def _same_device(op: str, name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device.type != device.type or (device.type == "cuda" and t.device.index != device.index):
        raise ValueError(f"GridBatch.{op}: {name} is on {t.device} but the grid is on {device}")


def _finite_points(op: str, points: JaggedTensor) -> None:
    """NaN or infinite points are errors (checked on the points' device: one flag read back;
    skipped while a CUDA graph is being captured, where nothing can be read back)."""
    p = points.jdata
    if p.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    if p.is_floating_point() and p.numel() and not bool(torch.isfinite(p).all()):
        bad = int((~torch.isfinite(p)).any(1).nonzero()[0, 0])
        raise ValueError(f"{op}: points must be finite, got {p[bad].tolist()} at point {bad}")


class _Coordinates(JaggedTensor):
    """GridBatch.ijk's value: a JaggedTensor that may still be called, as when ijk was a
    method (grid.ijk gives the same coordinates, with a DeprecationWarning)."""

    def __call__(self) -> JaggedTensor:
        _deprecation.warn("GridBatch.ijk is a property, as in fVDB: write grid.ijk, not "
                          "grid.ijk()", stacklevel=2)
        return self


def _capsules(j: JaggedTensor):
    return dlpack_pair(j.jdata, j.joffsets)


class GridBatch:
    """A batch of sparse voxel grids: for each grid, its active voxels' integer coordinates
    (ijk), each the row of a feature tensor, with a voxel size and an origin (voxel ijk's
    centre is at origin + voxel_size * ijk in world space). Immutable.

    Build one with from_ijk, from_points, from_nearest_voxels_to_points, from_mesh or
    from_dense, or from another batch (conv_grid, coarsened_grid, ...). The features of a
    batch are a [total_voxels, ...] tensor or a JaggedTensor jagged as voxel_offsets.

    Args:
        impl: The C++ grid batch (tilegrid._C.GridBatch) to wrap, as the builders make it.
    """

    def __init__(self, impl: "_C.GridBatch"):
        self._impl = impl
        # Plain values for the ops that torch.compile traces (it cannot read the C++ object):
        # the sampling ops' handle (sampling.register_grid), the voxel count and offsets.
        self._handle = sampling.register_grid(self)
        self._total_voxels = impl.total_voxels
        self._voxel_offsets = torch.from_dlpack(impl.voxel_offsets())

    # A copy is a new wrapper of the same (immutable) C++ grid with a handle of its own: a copied
    # handle would name the original, which may be gone when the copy samples.
    def __copy__(self) -> "GridBatch":
        return GridBatch(self._impl)

    def __deepcopy__(self, memo) -> "GridBatch":
        return GridBatch(self._impl)

    @classmethod
    def from_ijk(cls, ijk: JaggedTensor, voxel_sizes=1, origins=0) -> "GridBatch":
        """One grid per tensor of `ijk` (int32 or int64 [N_b, 3] each; int64 must fit int32);
        duplicates are merged and empty grids allowed. voxel_sizes / origins: a number or [3]
        for all grids, or [B, 3]; default 1 and 0 (fVDB's)."""
        if not isinstance(ijk, JaggedTensor):
            raise TypeError(f"GridBatch.from_ijk: ijk must be a JaggedTensor, got {type(ijk).__name__}")
        ijk = _int32_ijk("GridBatch.from_ijk", ijk)
        n = ijk.num_tensors
        jdata, joffsets = _capsules(ijk)
        impl = _C.GridBatch.from_ijk(
            jdata, joffsets, _per_grid(voxel_sizes, n, "voxel_sizes"), _per_grid(origins, n, "origins"),
            current_stream(ijk.jdata),
        )
        return cls(impl)

    @classmethod
    def from_points(cls, points: JaggedTensor, voxel_sizes=1, origins=0) -> "GridBatch":
        """The voxels that contain the points: ijk = round((p - origin) / voxel_size).
        voxel_sizes / origins as from_ijk's (default 1 and 0, fVDB's)."""
        return cls._from_points(_C.GridBatch.from_points, "from_points", points, voxel_sizes, origins)

    @classmethod
    def from_nearest_voxels_to_points(cls, points: JaggedTensor, voxel_sizes=1, origins=0) -> "GridBatch":
        """The 8 voxels around each point (the cell that trilinear sampling reads).
        voxel_sizes / origins as from_ijk's (default 1 and 0, fVDB's)."""
        return cls._from_points(
            _C.GridBatch.from_nearest_voxels_to_points, "from_nearest_voxels_to_points", points,
            voxel_sizes, origins,
        )

    @classmethod
    def _from_points(cls, build, op: str, points, voxel_sizes, origins) -> "GridBatch":
        n = _jagged_arg(op, "points", points).num_tensors
        return cls(build(
            *_capsules(points), _per_grid(voxel_sizes, n, "voxel_sizes"), _per_grid(origins, n, "origins"),
            current_stream(points.jdata),
        ))

    @classmethod
    @_deprecation.renamed_arguments("GridBatch.from_mesh", vertices="mesh_vertices",
                                    faces="mesh_faces")
    def from_mesh(cls, mesh_vertices: JaggedTensor, mesh_faces: JaggedTensor, voxel_sizes=1,
                  origins=0) -> "GridBatch":
        """The voxels whose cubes intersect the triangles of each mesh: mesh_vertices [V_b, 3]
        and mesh_faces [F_b, 3] (indices into the mesh's own vertices) a grid. voxel_sizes /
        origins as from_ijk's (default 1 and 0, fVDB's). The old keyword names vertices= and
        faces= still work, with a DeprecationWarning."""
        n = _jagged_arg("from_mesh", "mesh_vertices", mesh_vertices).num_tensors
        _jagged_arg("from_mesh", "mesh_faces", mesh_faces)
        impl = _C.GridBatch.from_mesh(
            *_capsules(mesh_vertices), *_capsules(mesh_faces),
            _per_grid(voxel_sizes, n, "voxel_sizes"), _per_grid(origins, n, "origins"),
            current_stream(mesh_vertices.jdata),
        )
        return cls(impl)

    @classmethod
    def from_dense(
        cls, num_grids: int, dense_dims, ijk_min=0, voxel_sizes=1, origins=0, mask=None,
        device=None,
    ) -> "GridBatch":
        """Every voxel of the box [ijk_min, ijk_min + dense_dims) in each of num_grids grids,
        or with mask (bool [X, Y, Z], dense_dims' shape) those where it is set (the same in
        every grid), built on `device` (default: mask's device, else the CPU). dense_dims and
        ijk_min: an int or three; voxel_sizes / origins as from_ijk's (default 1 and 0,
        fVDB's). A device passed by position after origins (before mask was an argument)
        still works, with a DeprecationWarning."""
        op = "GridBatch.from_dense"
        if isinstance(mask, (str, torch.device)):
            _deprecation.warn(f"{op}: device is now the argument after mask (fVDB's order); "
                              f"pass device={str(mask)!r}")
            mask, device = None, mask
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"{op}: mask must be a bool tensor, got {got}")
        if device is None:
            device = mask.device if mask is not None else "cpu"
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        num_grids = _int_arg(op, "num_grids", num_grids)
        dims = list(vec3(f"{op}: dense_dims", dense_dims, minimum=0))
        low = _ints3(op, "ijk_min", ijk_min)
        if mask is not None:
            if list(mask.shape) != dims:
                raise ValueError(f"{op}: mask must have the shape dense_dims {dims}, got "
                                 f"{list(mask.shape)}")
            _same_device("from_dense", "mask", mask, device)
        if num_grids < 1:
            raise ValueError(f"{op}: num_grids must be >= 1, got {num_grids}")
        if any(lo < -(2**31) or lo + d - 1 >= 2**31 for lo, d in zip(low, dims)):
            raise ValueError(f"{op}: the box leaves the int32 range")
        # Checked before any allocation: a box of 2000^3 voxels (8e9) otherwise asks for ~100
        # GB. Convolution maps index rows as int32 (ConvolutionPlan's limit).
        if num_grids * math.prod(dims) > 2**31 - 1:
            raise ValueError(f"{op}: {num_grids} grids of {' x '.join(map(str, dims))} voxels "
                             f"would be {num_grids * math.prod(dims)} voxels, more than 2**31 - 1")
        if device.type != "cuda" and mask is None:
            return cls(_C.GridBatch.from_dense(
                num_grids, dims, low, _per_grid(voxel_sizes, num_grids, "voxel_sizes"),
                _per_grid(origins, num_grids, "origins"),
            ))
        # On a GPU, or under a mask, the box's coordinates are made on the device and built like
        # any other ijk set.
        box = transfer.dense_ijk(dims, low, mask, device)
        ijk = JaggedTensor.from_data_and_offsets(
            box.repeat(int(num_grids), 1),
            torch.arange(int(num_grids) + 1, device=device, dtype=torch.int64) * box.shape[0],
        )
        return cls.from_ijk(ijk, voxel_sizes=voxel_sizes, origins=origins)

    @classmethod
    def from_zero_grids(cls, device="cpu") -> "GridBatch":
        """A batch that holds no grid (fVDB's).

        Args:
            device: Where the (empty) tree lives; default the CPU.
        """
        return indexing.zero_grids(device)

    @classmethod
    def from_zero_voxels(cls, device="cpu", voxel_sizes=1, origins=0) -> "GridBatch":
        """Grids with no active voxel (fVDB's): one for each row of voxel_sizes / origins.

        Args:
            device: Where the tree lives; default the CPU.
            voxel_sizes: A number or [3] (one grid), or [B, 3] (B grids); default 1.
            origins: As voxel_sizes; default 0.
        """
        return indexing.zero_voxel_grids(device, voxel_sizes, origins)

    @classmethod
    def from_cat(cls, grids: Sequence["GridBatch"]) -> "GridBatch":
        """One batch holding the grids of every batch in `grids`, in order (fVDB's; as jcat).

        Args:
            grids: The GridBatches (at least one).
        """
        return indexing.concatenated(grids)

    @classmethod
    def from_dense_axis_aligned_bounds(cls, num_grids: int, dense_dims, bounds_min=0, bounds_max=1,
                                       voxel_center: bool = False, device="cpu") -> "GridBatch":
        """num_grids dense grids of dense_dims voxels spanning world-space bounds (fVDB's).

        Args:
            num_grids: How many (identical) grids.
            dense_dims: Voxels along each axis: an int or three, each >= 1.
            bounds_min: The box's lowest world corner: a number or three; default 0.
            bounds_max: Its highest corner, above bounds_min on every axis; default 1.
            voxel_center: False (default): the bounds are the outer faces of the end voxels
                (voxel size (max - min) / dense_dims); True: they are the end voxels' centres
                (voxel size (max - min) / (dense_dims - 1), dense_dims >= 2).
            device: Where the tree lives; default the CPU.
        """
        return indexing.dense_over_bounds(num_grids, dense_dims, bounds_min, bounds_max, voxel_center,
                                               device)

    @property
    def device(self) -> torch.device:
        """The device the tree lives on."""
        return torch.device(self._impl.device)

    def to(self, device) -> "GridBatch":
        """This batch with its tree on `device` (a copy)."""
        device = torch.device(device)
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            return GridBatch(self._impl.to("cuda", index, current_stream(torch.device("cuda", index))))
        if device.type != "cpu":
            raise ValueError(f"GridBatch.to: expected a cpu or cuda device, got {device}")
        return GridBatch(self._impl.to("cpu", 0, 0))

    def cuda(self, index: Optional[int] = None) -> "GridBatch":
        """This batch on CUDA device `index` (default: the current one)."""
        return self.to(torch.device("cuda", index) if index is not None else "cuda")

    def cpu(self) -> "GridBatch":
        """This batch on the CPU."""
        return self.to("cpu")

    @property
    def num_grids(self) -> int:
        """The number of grids in the batch (B)."""
        return self._impl.num_grids

    @property
    def grid_count(self) -> int:
        """The number of grids in the batch (fVDB's name for num_grids)."""
        return self._impl.num_grids

    @property
    def total_voxels(self) -> int:
        """The number of active voxels of all grids (the rows of the batch's features)."""
        return self._total_voxels

    @property
    def num_voxels(self) -> torch.Tensor:
        """int64 [B] on the grid's device: each grid's voxel count (fVDB's property)."""
        return self._voxel_offsets.diff()

    def num_voxels_at(self, grid: int) -> int:
        """The voxel count of grid `grid` of the batch (fVDB's name)."""
        return self._impl.num_voxels(grid)

    @property
    def voxel_offsets(self) -> torch.Tensor:
        """int64 [B+1]: the joffsets of this batch's feature tensors."""
        return self._voxel_offsets

    @property
    def joffsets(self) -> torch.Tensor:
        """int64 [B+1] on the grid's device: grid b's voxels are rows joffsets[b] to
        joffsets[b + 1] of the batch's features (fVDB's name for voxel_offsets)."""
        return self._voxel_offsets

    @property
    def jidx(self) -> torch.Tensor:
        """int32 [total_voxels] on the grid's device: the grid each voxel (feature row) belongs
        to."""
        return _batch_index(self._voxel_offsets, self._total_voxels)

    @property
    def cum_voxels(self) -> torch.Tensor:
        """int64 [B] on the grid's device: the voxels of the grids before each grid (grid b's
        first row), as fVDB's cum_voxels."""
        return self._voxel_offsets[:-1]

    def cum_voxels_at(self, bi: int) -> int:
        """The voxels of the grids before grid `bi` (its first feature row)."""
        return int(self._voxel_offsets[self._grid_index("cum_voxels_at", bi)])

    def voxel_size_at(self, bi: int) -> torch.Tensor:
        """float64 [3] on the CPU: grid `bi`'s voxel size."""
        return self.voxel_sizes[self._grid_index("voxel_size_at", bi)]

    def origin_at(self, bi: int) -> torch.Tensor:
        """float64 [3] on the CPU: the world position of grid `bi`'s voxel (0, 0, 0)'s centre."""
        return self.origins[self._grid_index("origin_at", bi)]

    def _grid_index(self, op: str, bi) -> int:
        """bi as an index in [0, B) (negative ones count from the end), else an IndexError."""
        b = _int_arg(f"GridBatch.{op}", "bi", bi)
        if not -self.num_grids <= b < self.num_grids:
            raise IndexError(f"GridBatch.{op}: grid {b} out of range for {self.num_grids} grids")
        return b % self.num_grids

    @property
    def has_zero_grids(self) -> bool:
        """Whether the batch holds no grid."""
        return self.num_grids == 0

    @property
    def all_have_zero_voxels(self) -> bool:
        """Whether no grid of the batch has an active voxel."""
        return self._total_voxels == 0

    @property
    def any_have_zero_voxels(self) -> bool:
        """Whether some grid of the batch has no active voxel."""
        return self.has_zero_grids or bool((self.num_voxels == 0).any())

    def has_zero_voxels_at(self, bi: int) -> bool:
        """Whether grid `bi` (negative from the end) has no active voxel (fVDB's)."""
        return self.num_voxels_at(self._grid_index("has_zero_voxels_at", bi)) == 0

    def __len__(self) -> int:
        return self.num_grids

    def __getitem__(self, index) -> "GridBatch":
        """The grids `index` names, as a new batch (fVDB's indexing): an int (negative from
        the end), a slice, a list of ints or a boolean mask, or such a tensor. The voxels
        keep their order: grid[i]'s features are rows joffsets[i]:joffsets[i + 1] of the
        batch's (indexing.py)."""
        return indexing.select_grids(self, index)

    def __iter__(self):
        for b in range(self.num_grids):
            yield self[b]

    def index_int(self, bi: int) -> "GridBatch":
        """Grid `bi` as a batch of one (fVDB's; grid[bi])."""
        return self[int(bi)]

    def index_list(self, indices: list) -> "GridBatch":
        """The grids of a list of ints or a boolean mask (fVDB's; grid[indices])."""
        return self[list(indices)]

    def index_slice(self, s: slice) -> "GridBatch":
        """The grids of slice `s` (fVDB's; grid[s])."""
        return self[s]

    def index_tensor(self, indices: torch.Tensor) -> "GridBatch":
        """The grids of an integer or boolean tensor (fVDB's; grid[indices])."""
        return self[indices]

    @property
    def address(self) -> int:
        """An identifier of the tree this batch wraps: equal for copies of one batch (which
        share the immutable tree), as fVDB's address."""
        return id(self._impl)

    def is_same(self, other: "GridBatch") -> bool:
        """Whether `other` wraps the same tree (fVDB's).

        Args:
            other: Another GridBatch.
        """
        return isinstance(other, GridBatch) and other._impl is self._impl

    def has_same_address_and_grid_count(self, other) -> bool:
        """Whether `other` is a GridBatch of the same tree and grid count (fVDB's).

        Args:
            other: Anything.
        """
        return self.is_same(other) and other.num_grids == self.num_grids

    def is_contiguous(self) -> bool:
        """Always True: a batch owns its whole tree (indexing copies, where fVDB may view)."""
        return True

    def contiguous(self) -> "GridBatch":
        """This batch (it is contiguous already; fVDB's contiguous copies a view)."""
        return self

    @property
    def voxel_to_world_matrices(self) -> torch.Tensor:
        """float32 [B, 4, 4] on the grid's device (fVDB's): world = M @ (i, j, k, 1), the
        voxel size on the diagonal and the origin in the last column."""
        sizes, origins = self.voxel_sizes, self.origins
        m = torch.zeros(self.num_grids, 4, 4, dtype=torch.float64, device="cpu")
        m[:, [0, 1, 2], [0, 1, 2]] = sizes
        m[:, :3, 3] = origins
        m[:, 3, 3] = 1
        return m.to(device=self.device, dtype=torch.float32)

    @property
    def world_to_voxel_matrices(self) -> torch.Tensor:
        """float32 [B, 4, 4] on the grid's device (fVDB's): the inverses of
        voxel_to_world_matrices ((i, j, k, 1) = M @ world)."""
        sizes, origins = self.voxel_sizes, self.origins
        m = torch.zeros(self.num_grids, 4, 4, dtype=torch.float64, device="cpu")
        m[:, [0, 1, 2], [0, 1, 2]] = 1 / sizes
        m[:, :3, 3] = -origins / sizes
        m[:, 3, 3] = 1
        return m.to(device=self.device, dtype=torch.float32)

    def _node_counts(self, *shifts: int) -> list[torch.Tensor]:
        """int64 [B] for each shift: each grid's distinct blocks of 2^shift voxels an axis (its
        nodes of that level: shift 3 leaves, 7 lower nodes, 12 upper nodes); ijk read once."""
        ijk = self.ijk
        if ijk.jdata.shape[0] == 0:
            return [torch.zeros(self.num_grids, dtype=torch.int64, device=self.device) for _ in shifts]
        b, coords = ijk.jidx.long()[:, None], ijk.jdata.long()
        return [torch.bincount(torch.unique(torch.cat([b, coords >> s], dim=1), dim=0)[:, 0],
                               minlength=self.num_grids) for s in shifts]

    @property
    def num_leaf_nodes(self) -> torch.Tensor:
        """int64 [B] on the grid's device: each grid's leaves (8^3 blocks holding an active
        voxel; fVDB's)."""
        return self._node_counts(3)[0]

    @property
    def total_leaf_nodes(self) -> int:
        """The leaves of all grids (fVDB's)."""
        return self._impl.num_leaves

    @property
    def num_bytes(self) -> torch.Tensor:
        """int64 [B] on the grid's device: the bytes of each grid's nodes and of its entries in
        the tree's two offset tables (fVDB's name; total_bytes adds the tables' last
        entries)."""
        upper, lower, leaf = _C.grid_node_bytes
        uppers, lowers, leaves = self._node_counts(12, 7, 3)
        return uppers * upper + lowers * lower + leaves * leaf + 2 * 8

    @property
    def total_bytes(self) -> int:
        """The bytes of the whole tree (tree_bytes; fVDB's name)."""
        return self.tree_bytes

    def jagged_like(self, data: torch.Tensor) -> JaggedTensor:
        """`data` ([total_voxels, ...], a row a voxel) as a JaggedTensor jagged as this batch's
        voxels."""
        if not isinstance(data, torch.Tensor) or data.dim() < 1 or data.shape[0] != self._total_voxels:
            raise ValueError(f"GridBatch.jagged_like: data must be a tensor [{self._total_voxels}, "
                             f"...] (a row a voxel), got "
                             f"{list(data.shape) if isinstance(data, torch.Tensor) else type(data).__name__}")
        _same_device("jagged_like", "data", data, self.device)
        return JaggedTensor._from_trusted(data, self._voxel_offsets)

    @property
    def voxel_sizes(self) -> torch.Tensor:
        """float64 [B, 3] on the CPU: each grid's voxel size along each axis."""
        return torch.tensor(self._impl.voxel_sizes, dtype=torch.float64, device="cpu")

    @property
    def origins(self) -> torch.Tensor:
        """float64 [B, 3] on the CPU: the world position of each grid's voxel (0, 0, 0)'s
        centre."""
        return torch.tensor(self._impl.origins, dtype=torch.float64, device="cpu")

    @property
    def tree_bytes(self) -> int:
        """Bytes of the topology (all nodes and offsets)."""
        return self._impl.tree_bytes

    @property
    def bytes_per_voxel(self) -> float:
        """tree_bytes divided by the number of voxels (by 1 for an empty batch)."""
        return self.tree_bytes / max(self.total_voxels, 1)

    @property
    def ijk(self) -> JaggedTensor:
        """int32 [total_voxels, 3]: the coordinates of the active voxels in feature-row order,
        jagged as the batch's voxels. A property, as in fVDB; calling it (grid.ijk) still
        works, with a DeprecationWarning."""
        jdata, _ = self._impl.ijk(current_stream(self.device))
        return _Coordinates._from_trusted(torch.from_dlpack(jdata), self._voxel_offsets)

    def ijk_to_index(self, ijk: JaggedTensor, cumulative: bool = False) -> JaggedTensor:
        """Row of each coordinate (int64), -1 where the voxel is not active. As fVDB's: the
        row within its own grid by default; cumulative=True gives the row in the batch's
        feature tensor (offset by voxel_offsets[b] for grid b)."""
        if not isinstance(ijk, JaggedTensor):
            raise TypeError(f"GridBatch.ijk_to_index: ijk must be a JaggedTensor, got {type(ijk).__name__}")
        if ijk.jdata.dtype == torch.int64:  # coordinates outside int32 are in no grid
            limit = torch.iinfo(torch.int32)
            data = ijk.jdata
            outside = ((data < limit.min) | (data > limit.max)).any(1)
            ijk = ijk.jagged_like(data.clamp(limit.min, limit.max).to(torch.int32))
            rows = self.ijk_to_index(ijk, cumulative).jdata
            return ijk.jagged_like(rows.masked_fill(outside, -1))
        index = torch.from_dlpack(self._impl.ijk_to_index(*_capsules(ijk), current_stream(ijk.jdata)))
        if not cumulative and self.num_grids > 1:
            first = self.voxel_offsets.to(index.device)[ijk.jidx.long()]
            index = torch.where(index >= 0, index - first, index)
        return ijk.jagged_like(index)

    def ijk_to_inv_index(self, ijk: JaggedTensor, cumulative: bool = False) -> JaggedTensor:
        """The inverse of ijk_to_index (fVDB's): for each voxel of the batch, jagged as its
        voxels, the row of `ijk` that names it, -1 where none does (of several, the last).

        Args:
            ijk: int32 or int64 coordinates, a tensor [N_b, 3] a grid.
            cumulative: False: the row within ijk's tensor of that grid; True: within all of
                ijk's rows.
        """
        if not isinstance(ijk, JaggedTensor):
            raise TypeError(f"GridBatch.ijk_to_inv_index: ijk must be a JaggedTensor, got {type(ijk).__name__}")
        return indexing.inverse_index(self, ijk, cumulative)

    def world_to_voxel(self, points: JaggedTensor) -> JaggedTensor:
        """Continuous voxel coordinates of world points (voxel centres at integers)."""
        b = points.jidx.long()
        sizes, origins = (t.to(points.jdata) for t in (self.voxel_sizes, self.origins))
        return points.jagged_like((points.jdata - origins[b]) / sizes[b])

    def voxel_to_world(self, ijk: JaggedTensor) -> JaggedTensor:
        """World positions of (continuous) voxel coordinates."""
        b = ijk.jidx.long()
        data = ijk.jdata.to(torch.float64) if not ijk.jdata.is_floating_point() else ijk.jdata
        sizes, origins = (t.to(data) for t in (self.voxel_sizes, self.origins))
        return ijk.jagged_like(origins[b] + sizes[b] * data)

    @_deprecation.renamed_arguments("GridBatch.sample_trilinear", features="voxel_data")
    def sample_trilinear(self, points: JaggedTensor, voxel_data) -> JaggedTensor:
        """The voxels' features voxel_data (a [total_voxels, ...] tensor or JaggedTensor)
        trilinearly interpolated at the points; voxels that are not active count as zero.
        Differentiable in the features and in the points (same float dtype for both: float32
        or float64). fVDB's argument names (features= warns)."""
        features = voxel_data
        _jagged_arg("sample_trilinear", "points", points)
        if not torch.compiler.is_compiling():  # a value check: eager mode only
            _finite_points("sample_trilinear", points)
        data = features.jdata if isinstance(features, JaggedTensor) else features
        if data.shape[0] != self.total_voxels:
            raise ValueError(
                f"sample_trilinear: features must have {self.total_voxels} rows (one per voxel), "
                f"got shape {list(data.shape)}"
            )
        flat = data.reshape(data.shape[0], -1)
        pts, low = points.jdata, flat.dtype in (torch.float16, torch.bfloat16)
        if low:  # half-precision features: weights and sums in float32, result in their dtype
            flat, pts = flat.float(), pts.float()
        out = sampling.sample_trilinear(self._handle, pts, points.joffsets, flat)
        if low:
            out = out.to(data.dtype)
        return points.jagged_like(out.reshape(points.jdata.shape[0], *data.shape[1:]))

    @_deprecation.renamed_arguments("GridBatch.splat_trilinear", values="points_data")
    def splat_trilinear(self, points: JaggedTensor, points_data: JaggedTensor) -> JaggedTensor:
        """Point values points_data ([N, ...], jagged like points) spread over the 8 voxels
        around each point with trilinear weights; returns voxel features [total_voxels, ...].
        Differentiable in the values. fVDB's argument names (values= warns)."""
        values = points_data
        _jagged_arg("splat_trilinear", "points", points)
        if not torch.compiler.is_compiling():  # a value check: eager mode only
            _finite_points("splat_trilinear", points)
        data = values.jdata if isinstance(values, JaggedTensor) else values
        if data.shape[0] != points.jdata.shape[0]:
            raise ValueError(
                f"splat_trilinear: values must have one row per point ({points.jdata.shape[0]}), "
                f"got shape {list(data.shape)}"
            )
        flat = data.reshape(data.shape[0], -1)
        pts, low = points.jdata, flat.dtype in (torch.float16, torch.bfloat16)
        if low:
            flat, pts = flat.float(), pts.float()
        out = sampling.splat_trilinear(self._handle, self.total_voxels, pts, points.joffsets, flat)
        if low:
            out = out.to(data.dtype)
        return JaggedTensor._from_trusted(out.reshape(-1, *data.shape[1:]), self.voxel_offsets)

    # fVDB's spline sampling and region queries (spline.py, queries.py).

    def sample_trilinear_with_grad(self, points: JaggedTensor, voxel_data):
        """(values, gradients): voxel_data (``[total_voxels, *C]``) trilinearly interpolated at the
        world points (one [N_b, 3] tensor a grid), and the field's gradient with respect to the
        world position, ``[N, *C, 3]`` (spline.py). Differentiable in voxel_data and points."""
        from . import spline
        return spline.sample_trilinear_with_grad(self, points, voxel_data)

    def sample_bezier(self, points: JaggedTensor, voxel_data) -> JaggedTensor:
        """voxel_data (``[total_voxels, *C]``) interpolated at the world points with fVDB's
        quadratic B-spline ("Bezier") weights over the 3x3x3 voxels around each (spline.py);
        inactive voxels count as zero. Differentiable in voxel_data and points."""
        from . import spline
        return spline.sample_bezier(self, points, voxel_data)

    def sample_bezier_with_grad(self, points: JaggedTensor, voxel_data):
        """(values, gradients): sample_bezier(points, voxel_data) and the field's gradient with
        respect to the world position, ``[N, *C, 3]`` (spline.py)."""
        from . import spline
        return spline.sample_bezier_with_grad(self, points, voxel_data)

    def splat_bezier(self, points: JaggedTensor, points_data) -> JaggedTensor:
        """points_data (``[N, *C]``, a row a point of points) spread over the voxels with
        sample_bezier's weights, the adjoint of sample_bezier: ``[total_voxels, *C]``
        (spline.py). Differentiable in points_data and points."""
        from . import spline
        return spline.splat_bezier(self, points, points_data)

    def cubes_in_grid(self, cube_centers: JaggedTensor, cube_min=0, cube_max=0) -> JaggedTensor:
        """bool [N]: whether each cube (world centres cube_centers, corners at cube_min and
        cube_max from it: a number or three, default 0) lies wholly in active voxels
        (queries.py)."""
        from . import queries
        return queries.cubes_in_grid(self, cube_centers, cube_min, cube_max)

    def cubes_intersect_grid(self, cube_centers: JaggedTensor, cube_min=0, cube_max=0) -> JaggedTensor:
        """bool [N]: whether each cube (world centres cube_centers, corners at cube_min and
        cube_max from it: a number or three, default 0) touches an active voxel
        (queries.py)."""
        from . import queries
        return queries.cubes_intersect_grid(self, cube_centers, cube_min, cube_max)

    def rays_intersect_voxels(self, ray_origins, ray_directions, eps: float = 0.0) -> JaggedTensor:
        """bool [N]: whether each ray (ray_origins + t * ray_directions, t >= 0) crosses an
        active voxel over more than eps of t (queries.py)."""
        from . import queries
        return queries.rays_intersect_voxels(self, ray_origins, ray_directions, eps)

    def conv_grid(self, kernel_size, stride=1) -> "GridBatch":
        """The voxels a convolution of this grid writes (every output that some active voxel
        reaches through some tap, with fVDB 0.6's padding (K - 1) // 2 before o * stride;
        include/tilegrid/grid/convolution.h has the geometry). Voxel size x stride, origin at
        the centre of an output's receptive field (for even kernel sizes unlike fVDB 0.6, which
        keeps the origin: sparse_conv.py)."""
        return self._derived_conv_grid(kernel_size, stride, False)

    def conv_transpose_grid(self, kernel_size, stride=1) -> "GridBatch":
        """The voxels a transposed convolution of this grid writes. Voxel size / stride."""
        return self._derived_conv_grid(kernel_size, stride, True)

    def _derived_conv_grid(self, kernel_size, stride, transposed: bool) -> "GridBatch":
        k, s = vec3("conv_grid: kernel_size", kernel_size), vec3("conv_grid: stride", stride)
        return GridBatch(_C.conv_grid(self._impl, list(k), list(s), transposed,
                                      current_stream(self.device)))

    @_deprecation.renamed_arguments("GridBatch.max_pool", kernel_size="pool_factor")
    def max_pool(self, pool_factor, data, stride=0, coarse_grid=None):
        """(features, coarse grid): the max of each window of pool_factor voxels every stride
        (0 or None, the default: pool_factor) voxels, over the active ones; coarse grid default
        coarsened_grid(stride), as fVDB's (a window that holds no active voxel pools to 0).
        fVDB's argument names (kernel_size= warns).
        A window starts at stride * o for every pool_factor, as fVDB's (a convolution's kernel
        starts (K - 1) // 2 before)."""
        return pooling.max_pool(self, pool_factor, data, _pool_stride(stride), coarse_grid)

    @_deprecation.renamed_arguments("GridBatch.avg_pool", kernel_size="pool_factor")
    def avg_pool(self, pool_factor, data, stride=0, coarse_grid=None):
        """(features, coarse grid): the mean of each window over its active voxels, windows as
        max_pool's. fVDB's argument names (kernel_size= warns)."""
        return pooling.avg_pool(self, pool_factor, data, _pool_stride(stride), coarse_grid)

    def voxels_along_rays(self, ray_origins, ray_directions, max_voxels: int, eps: float = 0.0,
                          return_ijk: bool = True, cumulative: bool = False):
        """(voxels, times) of the active voxels each ray crosses, in order (rays.py): their
        int32 ijk (return_ijk=True, the default, as fVDB's), or with return_ijk=False their
        rows (within their grid, or in the batch with cumulative=True), and [n, 2] entry/exit
        t, one JaggedTensor entry a ray."""
        return rays.voxels_along_rays(self, ray_origins, ray_directions, max_voxels, eps,
                                           return_ijk, cumulative)

    def segments_along_rays(self, ray_origins, ray_directions, max_segments: int,
                            eps: float = 0.0) -> JaggedTensor:
        """[n, 2] start/end t of the runs of consecutive active voxels along each ray."""
        return rays.segments_along_rays(self, ray_origins, ray_directions, max_segments, eps)

    def uniform_ray_samples(self, ray_origins, ray_directions, t_min, t_max, step_size: float,
                            cone_angle: float = 0.0, include_end_segments: bool = True,
                            return_midpoints: bool = False, eps: float = 0.0) -> JaggedTensor:
        """Sample intervals along each ray inside its active segments (rays.py)."""
        return rays.uniform_ray_samples(self, ray_origins, ray_directions, t_min, t_max, step_size,
                                             cone_angle, include_end_segments, return_midpoints, eps)

    def ray_implicit_intersection(self, ray_origins, ray_directions, grid_scalars,
                                  eps: float = 0.0) -> JaggedTensor:
        """t of each ray's first zero crossing of a per-voxel field, -1 if none (rays.py)."""
        return rays.ray_implicit_intersection(self, ray_origins, ray_directions, grid_scalars, eps)

    def marching_cubes(self, field, level: float = 0.0):
        """(vertices, faces, normals), one JaggedTensor entry a grid: the surface where the
        per-voxel field ([total_voxels] or [total_voxels, 1], float32/float64) crosses level,
        over the cubes of 8 active voxel centres (C++: grid/marching_cubes.h). faces index
        their own grid's vertices (int64); normals point where the field is above level."""
        data = field.jdata if isinstance(field, JaggedTensor) else field
        if data.dim() == 2 and data.shape[1] == 1:
            data = data[:, 0]
        _same_device("marching_cubes", "field", data, self.device)
        v, n, f, voff, foff = (torch.from_dlpack(t) for t in _C.grid_marching_cubes(
            self._impl, data.contiguous(), float(level), current_stream(data)))
        return (JaggedTensor._from_trusted(v, voff), JaggedTensor._from_trusted(f, foff),
                JaggedTensor._from_trusted(n, voff))

    def integrate_tsdf(self, truncation_distance: float, projection_matrices: torch.Tensor,
                       cam_to_world_matrices: torch.Tensor, tsdf, weights, depth_images: torch.Tensor,
                       weight_images=None):
        """(grid, tsdf, weights): depth image b fused into grid b, the grid grown by the
        truncation band around the measured surface (tsdf.py; C++: grid/tsdf.h)."""
        return _tsdf.integrate_tsdf(self, truncation_distance, projection_matrices, cam_to_world_matrices,
                                        tsdf, weights, depth_images, weight_images)

    def save_nanovdb(self, path, data=None, names=None, name: Optional[str] = None, compressed: bool = False,
                     verbose: bool = False) -> None:
        """Writes this batch and its features to a .nvdb file (fVDB's method; tg.save).

        Args:
            path: The file to write (a str or os.PathLike).
            data: None, or per-voxel features (a tensor or JaggedTensor, or a list of them),
                as tg.save's features.
            names: One name per grid, or one for all; default "grid_<b>".
            name: One name for every grid; takes precedence over names.
            compressed: Must be False: tilegrid writes uncompressed files (no Blosc).
            verbose: Print what was written.
        """
        from .nvdb_io import save

        if compressed:
            raise NotImplementedError("GridBatch.save_nanovdb: compressed (Blosc) .nvdb files are not written; "
                                      "pass compressed=False")
        save(path, self, data, name if name is not None else names)
        if verbose:
            print(f"save_nanovdb: {self.num_grids} grids, {self.total_voxels} voxels -> {path}")

    def morton(self, offset=None) -> JaggedTensor:
        """Z-order codes (int64) of the voxels' ijk, i in the highest bit of each triple.

        Args:
            offset: None: coordinates relative to each grid's lowest corner; else three ints
                added to every ijk first (fVDB's argument), which must leave them in
                [0, 2^21).
        """
        return serialize.morton(self, offset)

    def morton_zyx(self, offset=None) -> JaggedTensor:
        """Z-order codes with the axes swapped, k in the highest bit (fVDB's transposed order).

        Args:
            offset: As morton's.
        """
        return serialize.morton(self, offset, zyx=True)

    def hilbert(self, offset=None) -> JaggedTensor:
        """Hilbert-curve codes (int64) of the voxels' ijk.

        Args:
            offset: As morton's.
        """
        return serialize.hilbert(self, offset)

    def hilbert_zyx(self, offset=None) -> JaggedTensor:
        """Hilbert-curve codes with the axes swapped (fVDB's transposed order).

        Args:
            offset: As morton's.
        """
        return serialize.hilbert(self, offset, zyx=True)

    @_deprecation.renamed_arguments("GridBatch.coarsened_grid", factor="coarsening_factor")
    def coarsened_grid(self, coarsening_factor) -> "GridBatch":
        """Voxels of coarsening_factor^3 blocks merged (an int or three; voxel size x the
        factor, centred on the block). fVDB's argument name (factor= warns)."""
        return derived.coarsened(self, coarsening_factor)

    @_deprecation.renamed_arguments("GridBatch.refined_grid", factor="subdiv_factor")
    def refined_grid(self, subdiv_factor, mask=None) -> "GridBatch":
        """Each voxel split into subdiv_factor^3 (an int or three; voxel size / subdiv_factor),
        or with mask (bool [total_voxels]) only the voxels where it is set (fVDB's
        arguments; factor= still works, with a DeprecationWarning)."""
        grid = self if mask is None else self.pruned_grid(mask)
        return derived.refined(grid, subdiv_factor)

    def refine(self, subdiv_factor, data, mask=None, fine_grid: Optional["GridBatch"] = None):
        """(fine data, fine grid): nearest-neighbour upsampling, as fVDB's refine. Each fine
        voxel takes its parent's row of data ([total_voxels, ...], a tensor or a
        JaggedTensor); fine_grid defaults to refined_grid(subdiv_factor, mask) (mask, bool
        [total_voxels], is read only to build it); a voxel of a given fine_grid without a
        parent here gets zeros. Differentiable in data."""
        if fine_grid is None:
            fine_grid = self.refined_grid(subdiv_factor, mask)
        values = data.jdata if isinstance(data, JaggedTensor) else data
        fine = derived.refine_features(self, fine_grid, values, subdiv_factor)
        return JaggedTensor._from_trusted(fine, fine_grid.voxel_offsets), fine_grid

    def dual_grid(self, exclude_border: bool = False) -> "GridBatch":
        """Voxels at the corners of this grid's voxels (same voxel size, origin shifted by
        minus half a voxel; dual voxel ijk is the lower corner of primal voxel ijk).

        exclude_border (fVDB's argument and default): False keeps every corner of every
        voxel (primal ijk + {0,1}^3). True drops the border: a dual voxel ijk stays only where
        the primal voxels ijk + {0,1}^3 are all active, as fVDB's rule, so the result's
        coordinates are a subset of the primal's (a 2x2x2 block gives one dual voxel, an
        isolated voxel none)."""
        return derived.dual(self, exclude_border)

    @_deprecation.renamed_arguments("GridBatch.dilated_grid", n="dilation")
    def dilated_grid(self, dilation: int) -> "GridBatch":
        """Every voxel within dilation voxels (in each axis) of an active voxel. fVDB's
        argument name (n= warns)."""
        return derived.dilated(self, dilation)

    def pruned_grid(self, mask) -> "GridBatch":
        """Only the voxels where mask (bool [total_voxels]) is true."""
        return derived.pruned(self, mask)

    def coarsen_features(self, coarse_grid: "GridBatch", features, factor, reduce: str = "mean"):
        """This grid's features pooled into `coarse_grid` (this grid coarsened by factor)."""
        return derived.coarsen_features(self, coarse_grid, features, factor, reduce)

    def refine_features(self, fine_grid: "GridBatch", features, factor):
        """This grid's features copied to `fine_grid` (this grid refined by factor)."""
        return derived.refine_features(self, fine_grid, features, factor)

    def _rounded_voxel_coordinates(self, op: str, points) -> tuple[JaggedTensor, torch.Tensor]:
        """(points, float64 [N, 3]): the coordinates of the voxel containing each point, rounded
        as from_points rounds, (p - origin) / voxel_size in float64 with halves away from zero
        (std::round; trunc(u) + sign(u) where |u - trunc(u)| >= 0.5 is exactly that, where
        floor(|u| + 0.5) is not: 0.49999999999999994 + 0.5 rounds to 1 in float64)."""
        p = _jagged_arg(op, "points", points)
        b = p.jidx.long()
        sizes, origins = (t.to(p.jdata.device) for t in (self.voxel_sizes, self.origins))
        u = (p.jdata.double() - origins[b]) / sizes[b]
        whole = torch.trunc(u)
        return p, whole + torch.sign(u) * ((u - whole).abs() >= 0.5)

    def points_to_ijk(self, points: JaggedTensor) -> JaggedTensor:
        """The coordinates of the voxel containing each world point (int32), rounded as
        from_points rounds: (p - origin) / voxel_size in float64, halves away from zero. A
        point whose voxel has no int32 coordinates (NaN, infinite or too far) is an error
        (checked in eager mode: one flag read back)."""
        p, rounded = self._rounded_voxel_coordinates("points_to_ijk", points)
        limit = torch.iinfo(torch.int32)
        capturing = rounded.is_cuda and torch.cuda.is_current_stream_capturing()
        if rounded.numel() and not torch.compiler.is_compiling() and not capturing:
            bad = ~((rounded >= limit.min) & (rounded <= limit.max)).all(1)  # NaN is bad too
            if bool(bad.any()):
                n = int(bad.nonzero()[0, 0])
                raise ValueError(f"points_to_ijk: point {n}, {p.jdata[n].tolist()}, lies in no "
                                 f"voxel with int32 coordinates (voxel {rounded[n].tolist()})")
        return p.jagged_like(rounded.to(torch.int32))

    def points_to_index(self, points: JaggedTensor, cumulative: bool = False) -> JaggedTensor:
        """The row of the voxel containing each point (int64, -1 where inactive, and for NaN,
        infinite or far points, which are in no voxel): within its grid, or in the batch's
        features with cumulative=True (as ijk_to_index)."""
        p, rounded = self._rounded_voxel_coordinates("points_to_index", points)
        # Outside int32 (NaN included): one past int32's range, which ijk_to_index finds in no
        # grid, and no int64 overflow for huge values.
        outside = ~((rounded >= torch.iinfo(torch.int32).min) & (rounded <= torch.iinfo(torch.int32).max))
        ijk = rounded.masked_fill(outside, 2.0**31).to(torch.int64)
        return self.ijk_to_index(p.jagged_like(ijk), cumulative)

    def points_in_grid(self, points: JaggedTensor) -> JaggedTensor:
        """Whether the voxel containing each point is active (bool); every point that built a
        grid with from_points tests inside it, and NaN, infinite or far points test outside."""
        return points.jagged_like(self.points_to_index(points, cumulative=True).jdata >= 0)

    @property
    def bboxes(self) -> torch.Tensor:
        """int32 [B, 2, 3] on the grid's device: each grid's lowest and highest active ijk
        (inclusive), zeros for a grid without voxels (fVDB's bboxes)."""
        ijk = self.ijk
        data, b = ijk.jdata, ijk.jidx.long()[:, None].expand(-1, 3)
        lo = torch.full((self.num_grids, 3), torch.iinfo(torch.int32).max, dtype=torch.int32,
                        device=data.device).scatter_reduce(0, b, data, "amin")
        hi = torch.full((self.num_grids, 3), torch.iinfo(torch.int32).min, dtype=torch.int32,
                        device=data.device).scatter_reduce(0, b, data, "amax")
        empty = (self.num_voxels == 0)[:, None, None]
        return torch.stack([lo, hi], 1).masked_fill(empty, 0)

    @property
    def dual_bboxes(self) -> torch.Tensor:
        """int32 [B, 2, 3] on the grid's device: the bounding boxes of the dual grids (each
        grid's bbox with its upper corner + 1), zeros for a grid without voxels."""
        box = self.bboxes
        box[:, 1] += (self.num_voxels > 0).to(torch.int32)[:, None]
        return box

    @property
    def total_bbox(self) -> torch.Tensor:
        """int32 [2, 3] on the grid's device: the bounding box of every grid's voxels together
        (zeros when there are none)."""
        if self._total_voxels == 0:
            return torch.zeros(2, 3, dtype=torch.int32, device=self.device)
        data = self.ijk.jdata
        return torch.stack([data.amin(0), data.amax(0)])

    def bbox_at(self, bi: int) -> torch.Tensor:
        """int32 [2, 3]: grid `bi`'s bounding box (as bboxes[bi])."""
        return self.bboxes[self._grid_index("bbox_at", bi)]

    def dual_bbox_at(self, bi: int) -> torch.Tensor:
        """int32 [2, 3]: the bounding box of grid `bi`'s dual grid (as dual_bboxes[bi])."""
        return self.dual_bboxes[self._grid_index("dual_bbox_at", bi)]

    def bbox(self) -> torch.Tensor:
        """int32 [B, 2, 3] on the CPU: deprecated, use the property bboxes (fVDB's name; on the
        grid's device)."""
        _deprecation.warn("GridBatch.bbox() is deprecated: use the property GridBatch.bboxes "
                          "(fVDB's name; on the grid's device)")
        return self.bboxes.cpu()

    def coords_in_grid(self, ijk: JaggedTensor) -> JaggedTensor:
        """Whether each coordinate (a JaggedTensor with one [N_b, 3] integer tensor a grid) is
        an active voxel of its grid (bool [N], jagged like ijk)."""
        return ijk.jagged_like(self.ijk_to_index(_jagged_arg("coords_in_grid", "ijk", ijk)).jdata >= 0)

    def sample_nearest(self, points: JaggedTensor, voxel_data) -> JaggedTensor:
        """The features (voxel_data, [total_voxels, ...]) of the active voxel nearest each
        world point among the 8 around it, zero where none is (transfer.py).
        Differentiable in voxel_data."""
        return transfer.sample_nearest(self, points, voxel_data)

    def neighbor_indexes(self, ijk: JaggedTensor, extent: int, bitshift: int = 0) -> JaggedTensor:
        """int64 [N, 2 extent + 1, 2 extent + 1, 2 extent + 1]: the rows (within their grid, -1
        where inactive) of the voxels within extent of each coordinate of ijk, shifted left by
        bitshift bits first (transfer.py)."""
        return transfer.neighbor_indexes(self, ijk, extent, bitshift)

    def inject_from(self, src_grid: "GridBatch", src, dst=None, default_value=0):
        """This batch's features with src_grid's features src copied in at the voxels both
        have: into dst in place, or a new tensor of default_value (transfer.inject).
        Differentiable in src and dst."""
        return transfer.inject(self, src_grid, src, dst, default_value)

    def inject_to(self, dst_grid: "GridBatch", src, dst=None, default_value=0):
        """This batch's features src copied into dst_grid's voxels that this batch has: into
        dst (dst_grid's features) in place, or a new tensor of default_value
        (transfer.inject). Differentiable in src and dst."""
        return transfer.inject(dst_grid, self, src, dst, default_value)

    def inject_from_ijk(self, src_ijk: JaggedTensor, src, dst=None, default_value=0):
        """This batch's features with src (features at the coordinates src_ijk) copied in at
        those that are active: into dst in place, or a new tensor of default_value
        (transfer.py). Differentiable in src and dst."""
        return transfer.inject_from_ijk(self, src_ijk, src, dst, default_value)

    def inject_to_dense_cminor(self, sparse_data, min_coord=None, grid_size=None) -> torch.Tensor:
        """The features sparse_data (``[total_voxels, *C]``) in dense volumes ``[B, X, Y, Z, *C]``
        whose index (0, 0, 0) is voxel min_coord (default total_bbox's lowest corner), of
        grid_size (default total_bbox's extent); zeros elsewhere. Differentiable."""
        return transfer.inject_to_dense(self, sparse_data, min_coord, grid_size, True)

    def inject_to_dense_cmajor(self, sparse_data, min_coord=None, grid_size=None) -> torch.Tensor:
        """As inject_to_dense_cminor, channels first: ``[B, *C, X, Y, Z]``."""
        return transfer.inject_to_dense(self, sparse_data, min_coord, grid_size, False)

    def inject_from_dense_cminor(self, dense_data: torch.Tensor, dense_origins=0) -> JaggedTensor:
        """The voxels' features read from dense volumes dense_data ``[B, X, Y, Z, *C]`` whose index
        (0, 0, 0) is voxel dense_origins (default 0, as fVDB's); zeros for voxels outside.
        Differentiable."""
        return transfer.inject_from_dense(self, dense_data, dense_origins, True)

    def inject_from_dense_cmajor(self, dense_data: torch.Tensor, dense_origins=0) -> JaggedTensor:
        """As inject_from_dense_cminor, from channels-first volumes ``[B, *C, X, Y, Z]``."""
        return transfer.inject_from_dense(self, dense_data, dense_origins, False)

    def inject_to_dense(self, features, min_coord=None, size=None) -> torch.Tensor:
        """Deprecated: inject_to_dense_cminor (fVDB's name). Here a size left out reaches from
        min_coord to the batch's highest voxel."""
        _deprecation.warn("GridBatch.inject_to_dense is deprecated: use inject_to_dense_cminor "
                          "(fVDB's name), whose grid_size defaults to the bounding box's extent")
        if size is None and min_coord is not None:
            lo = torch.as_tensor(min_coord, dtype=torch.int64).to(self.device)
            size = (self.total_bbox[1].long() - lo + 1).tolist()
        data = features.jdata if isinstance(features, JaggedTensor) else features
        return transfer.inject_to_dense(self, data, min_coord, size, True)

    def inject_from_dense(self, dense: torch.Tensor, min_coord=None) -> torch.Tensor:
        """Deprecated: inject_from_dense_cminor (fVDB's name), whose dense_origins default 0;
        here min_coord defaults to the batch's lowest voxel. Returns a tensor."""
        _deprecation.warn("GridBatch.inject_from_dense is deprecated: use inject_from_dense_cminor "
                          "(fVDB's name), whose dense_origins default to 0")
        lo = self.total_bbox[0] if min_coord is None else min_coord
        return transfer.inject_from_dense(self, dense, lo, True).jdata

    def merged_grid(self, other: "GridBatch") -> "GridBatch":
        """The union of this batch's and other's voxels, grid b with grid b, with this batch's
        voxel sizes and origins (transfer.py)."""
        return transfer.merged_grid(self, other)

    def clipped_grid(self, ijk_min, ijk_max) -> "GridBatch":
        """The voxels inside the box [ijk_min, ijk_max] (inclusive; an int, three ints or
        [B, 3] a grid), in this batch's order (transfer.py)."""
        return transfer.clipped_grid(self, ijk_min, ijk_max)

    def clip(self, features, ijk_min, ijk_max):
        """(features, grid): clipped_grid(ijk_min, ijk_max) and the rows of features
        ([total_voxels, ...]) of the voxels it keeps. Differentiable in features."""
        return transfer.clip(self, features, ijk_min, ijk_max)

    def __repr__(self) -> str:
        return (
            f"GridBatch(num_grids={self.num_grids}, total_voxels={self.total_voxels}, "
            f"bytes_per_voxel={self.bytes_per_voxel:.2f}, device={self.device})"
        )
