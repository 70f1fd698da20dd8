"""tilegrid.Grid: one sparse voxel grid, fVDB's single-grid class.

A Grid is a thin layer over a GridBatch that holds exactly one grid. It has GridBatch's
methods under fVDB's single-grid names and arguments, but speaks in plain tensors: points,
coordinates and features are ``torch.Tensor`` s of ``[N, ...]`` rows (not JaggedTensors),
per-grid values are a scalar or a ``[3]`` tensor (not ``[B, ...]``), and a derived grid is a
Grid. Each method wraps its tensors as a JaggedTensor of one tensor, calls the GridBatch
method and unwraps the result, so the numbers are GridBatch's.

    grid = tg.Grid.from_points(points, voxel_size=0.05)
    values = grid.sample_trilinear(queries, features)   # [M, C] tensor
    coarse = grid.coarsened_grid(2)                      # a Grid
    batch = grid.to_gridbatch()                          # the GridBatch of one grid
    grid = tg.Grid.from_grid_batch(batch)                # and back

The rays' results (voxels_along_rays, segments_along_rays, uniform_ray_samples) stay
JaggedTensors with one tensor a ray, as fVDB's. Dense volumes keep fVDB's leading axis of 1
(inject_to_dense_cminor gives ``[1, X, Y, Z, *C]`` and inject_from_dense_cminor reads one).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch

from .batch import GridBatch, _int_arg
from .jagged_tensor import JaggedTensor


def _kind(value) -> str:
    return "a JaggedTensor" if isinstance(value, JaggedTensor) else type(value).__name__


def _tensor(op: str, name: str, value) -> torch.Tensor:
    """value, which must be a torch.Tensor (not a JaggedTensor, a list or a number)."""
    if not isinstance(value, torch.Tensor):
        hint = (" (a Grid takes plain tensors; grid.grid_batch takes JaggedTensors)"
                if isinstance(value, JaggedTensor) else "")
        raise TypeError(f"Grid.{op}: {name} must be a torch.Tensor, got {_kind(value)}{hint}")
    return value


def _optional_tensor(op: str, name: str, value) -> Optional[torch.Tensor]:
    return None if value is None else _tensor(op, name, value)


def _one(op: str, name: str, value) -> JaggedTensor:
    """A tensor of rows as a JaggedTensor holding that one tensor (no copy)."""
    t = _tensor(op, name, value)
    if t.dim() < 1:
        raise ValueError(f"Grid.{op}: {name} must have at least one dimension [N, ...], got a "
                         f"scalar tensor")
    offsets = torch.tensor([0, t.shape[0]], dtype=torch.int64, device=t.device)
    return JaggedTensor._from_trusted(t, offsets)


def _transform(op: str, voxel_size, origin) -> dict:
    """A single grid's voxel_size and origin, checked (_vec3), as GridBatch's keywords."""
    return dict(voxel_sizes=_vec3(op, "voxel_size", voxel_size),
                origins=_vec3(op, "origin", origin))


def _vec3(op: str, name: str, value):
    """value, checked to be a number or three numbers (fVDB's NumericMaxRank1: one grid's
    voxel size, origin, box corner, ...); returned as given."""
    if isinstance(value, (JaggedTensor, str, bytes)):
        raise TypeError(f"Grid.{op}: {name} must be a number or three numbers, got "
                        f"{_kind(value)}")
    try:
        t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, device="cpu")
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise TypeError(f"Grid.{op}: {name} must be a number or three numbers, got "
                        f"{value!r}") from None
    if t.dim() > 1 or (t.dim() == 1 and t.numel() != 3):
        raise ValueError(f"Grid.{op}: {name} must be a number or three numbers (one grid), got "
                         f"shape {list(t.shape)}")
    return value


def _batch(op: str, name: str, value) -> GridBatch:
    """The GridBatch of a Grid argument."""
    if not isinstance(value, Grid):
        hint = " (wrap it with Grid.from_grid_batch)" if isinstance(value, GridBatch) else ""
        raise TypeError(f"Grid.{op}: {name} must be a Grid, got {_kind(value)}{hint}")
    return value._grid_batch


def _optional_batch(op: str, name: str, value) -> Optional[GridBatch]:
    return None if value is None else _batch(op, name, value)


def _leading_one(op: str, name: str, value, dims: int) -> torch.Tensor:
    """A tensor of one camera or image ([...] of `dims` dimensions), given with or without the
    batch axis of 1, as [1, ...]."""
    t = _tensor(op, name, value)
    if t.dim() == dims:
        return t.unsqueeze(0)
    if t.dim() == dims + 1 and t.shape[0] == 1:
        return t
    raise ValueError(f"Grid.{op}: {name} must have {dims} dimensions (or {dims + 1} with a "
                     f"leading 1), got shape {list(t.shape)}")


def _plain(value):
    """A GridBatch result for its one grid: a JaggedTensor as its tensor, a GridBatch as a
    Grid, a tuple element by element; anything else as it is."""
    if isinstance(value, JaggedTensor):
        return value.jdata
    if isinstance(value, GridBatch):
        return Grid(value)
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


class Grid:
    """One sparse voxel grid (fVDB's Grid): the integer coordinates (ijk) of its active voxels,
    each the row of a feature tensor, with a voxel size and an origin (voxel ijk's centre lies
    at origin + voxel_size * ijk in world space). Immutable; the features are separate
    ``[num_voxels, ...]`` tensors.

    Build one with from_ijk, from_points, from_nearest_voxels_to_points, from_mesh,
    from_dense, from_dense_axis_aligned_bounds, from_zero_voxels or from_nanovdb, from
    another grid (coarsened_grid, dual_grid, ...), or from a GridBatch of one grid
    (``Grid(grid_batch)`` or from_grid_batch; to_gridbatch goes back).

    Args:
        grid_batch: The GridBatch to wrap; it must hold exactly one grid (select one of a
            larger batch with ``grid_batch[i]``).
    """

    __slots__ = ("_grid_batch",)

    def __init__(self, grid_batch: GridBatch) -> None:
        if not isinstance(grid_batch, GridBatch):
            raise TypeError(f"Grid: grid_batch must be a GridBatch, got {_kind(grid_batch)}")
        if grid_batch.num_grids != 1:
            raise ValueError(f"Grid: grid_batch must hold exactly one grid, got "
                             f"{grid_batch.num_grids}; select one with grid_batch[i]")
        object.__setattr__(self, "_grid_batch", grid_batch)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Grid is immutable: cannot set {name!r}")

    def __copy__(self) -> Grid:
        return Grid(copy.copy(self._grid_batch))

    def __deepcopy__(self, memo) -> Grid:
        return Grid(copy.deepcopy(self._grid_batch, memo))

    # ---------------------------------------------------------------- conversions

    @classmethod
    def from_grid_batch(cls, grid_batch: GridBatch) -> Grid:
        """The Grid of a GridBatch that holds one grid (the same tree, no copy).

        Args:
            grid_batch: A GridBatch of exactly one grid.
        """
        return cls(grid_batch)

    @property
    def grid_batch(self) -> GridBatch:
        """The GridBatch of one grid that this Grid wraps (the same object each time)."""
        return self._grid_batch

    def to_gridbatch(self) -> GridBatch:
        """This grid as a GridBatch of one grid (fVDB's name; the wrapped batch, no copy)."""
        return self._grid_batch

    # ---------------------------------------------------------------- builders

    @classmethod
    def from_ijk(cls, ijk: torch.Tensor, voxel_size=1, origin=0) -> Grid:
        """A grid of the voxels at the coordinates ijk (duplicates merged).

        Args:
            ijk: int32 or int64 [N, 3] voxel coordinates (int64 ones must fit int32).
            voxel_size: The world size of a voxel: a number or three; default 1.
            origin: The world position of voxel (0, 0, 0)'s centre: a number or three;
                default 0.
        """
        op = "from_ijk"
        return cls(GridBatch.from_ijk(_one(op, "ijk", ijk), **_transform(op, voxel_size, origin)))

    @classmethod
    def from_points(cls, points: torch.Tensor, voxel_size=1, origin=0) -> Grid:
        """A grid of the voxels that contain the world points.

        Args:
            points: Float [N, 3] world positions.
            voxel_size: The world size of a voxel: a number or three; default 1.
            origin: The world position of voxel (0, 0, 0)'s centre: a number or three;
                default 0.
        """
        op = "from_points"
        return cls(GridBatch.from_points(_one(op, "points", points),
                                         **_transform(op, voxel_size, origin)))

    @classmethod
    def from_nearest_voxels_to_points(cls, points: torch.Tensor, voxel_size=1, origin=0) -> Grid:
        """A grid of the 8 voxels around each world point (those trilinear sampling reads).

        Args:
            points: Float [N, 3] world positions.
            voxel_size: The world size of a voxel: a number or three; default 1.
            origin: The world position of voxel (0, 0, 0)'s centre: a number or three;
                default 0.
        """
        op = "from_nearest_voxels_to_points"
        return cls(GridBatch.from_nearest_voxels_to_points(
            _one(op, "points", points), **_transform(op, voxel_size, origin)))

    @classmethod
    def from_mesh(cls, mesh_vertices: torch.Tensor, mesh_faces: torch.Tensor, voxel_size=1,
                  origin=0) -> Grid:
        """A grid of the voxels whose cubes meet the triangles of a mesh.

        Args:
            mesh_vertices: Float [V, 3] world positions of the vertices.
            mesh_faces: Integer [F, 3] triangles, indices into mesh_vertices.
            voxel_size: The world size of a voxel: a number or three; default 1.
            origin: The world position of voxel (0, 0, 0)'s centre: a number or three;
                default 0.
        """
        op = "from_mesh"
        return cls(GridBatch.from_mesh(_one(op, "mesh_vertices", mesh_vertices),
                                       _one(op, "mesh_faces", mesh_faces),
                                       **_transform(op, voxel_size, origin)))

    @classmethod
    def from_dense(cls, dense_dims, ijk_min=0, voxel_size=1, origin=0,
                   mask: Optional[torch.Tensor] = None, device=None) -> Grid:
        """A grid of every voxel of the box [ijk_min, ijk_min + dense_dims), or with mask only
        of those where it is set.

        Args:
            dense_dims: The box's voxels along each axis: an int or three.
            ijk_min: The box's lowest voxel: an int or three; default 0.
            voxel_size: The world size of a voxel: a number or three; default 1.
            origin: The world position of voxel (0, 0, 0)'s centre: a number or three;
                default 0.
            mask: None (default), or a bool tensor of the box's shape [X, Y, Z] selecting
                the voxels to keep.
            device: Where to build the grid; default mask's device, else the CPU.
        """
        op = "from_dense"
        if mask is not None and not isinstance(mask, torch.Tensor):
            raise TypeError(f"Grid.{op}: mask must be a bool torch.Tensor or None, got "
                            f"{_kind(mask)}")
        return cls(GridBatch.from_dense(1, _vec3(op, "dense_dims", dense_dims),
                                        _vec3(op, "ijk_min", ijk_min),
                                        **_transform(op, voxel_size, origin), mask=mask,
                                        device=device))

    @classmethod
    def from_dense_axis_aligned_bounds(cls, dense_dims, bounds_min=0, bounds_max=1,
                                       voxel_center: bool = False, device="cpu") -> Grid:
        """A dense grid of dense_dims voxels spanning a box of world space.

        Args:
            dense_dims: The voxels along each axis: an int or three, each >= 1.
            bounds_min: The box's lowest world corner: a number or three; default 0.
            bounds_max: Its highest world corner, above bounds_min on every axis; default 1.
            voxel_center: False (default): the bounds are the outer faces of the end voxels;
                True: they are the end voxels' centres (dense_dims >= 2).
            device: Where to build the grid; default the CPU.
        """
        op = "from_dense_axis_aligned_bounds"
        return cls(GridBatch.from_dense_axis_aligned_bounds(
            1, _vec3(op, "dense_dims", dense_dims), _vec3(op, "bounds_min", bounds_min),
            _vec3(op, "bounds_max", bounds_max), voxel_center, device))

    @classmethod
    def from_zero_voxels(cls, device="cpu", voxel_size=1, origin=0) -> Grid:
        """A grid with no active voxel.

        Args:
            device: Where the grid lives; default the CPU.
            voxel_size: The world size of a voxel: a number or three; default 1.
            origin: The world position of voxel (0, 0, 0)'s centre: a number or three;
                default 0.
        """
        op = "from_zero_voxels"
        return cls(GridBatch.from_zero_voxels(device, **_transform(op, voxel_size, origin)))

    @classmethod
    def from_nanovdb(cls, path, *, index: int = 0, name: Optional[str] = None, device="cpu",
                     verbose: bool = False) -> tuple[Grid, torch.Tensor, str]:
        """One grid of a .nvdb file (as tg.load reads it) with its features and name.

        Args:
            path: The file (a str or os.PathLike).
            index: Which grid of the file, by position (negative from the end); default 0.
            name: Which grid, by name; takes precedence over index.
            device: Where to put the grid and its features; default the CPU.
            verbose: Print what was read.

        Returns:
            (grid, data, name): the Grid, its features ([num_voxels, ...]; an empty float32
            tensor [0] when the file stores none, as fVDB's) and the grid's name. A file that
            stores several feature arrays is refused: read it with tg.load.
        """
        from .nvdb_io import load

        op = "from_nanovdb"
        batch, features, names = load(path, device=device)
        if name is not None:
            if not isinstance(name, str):
                raise TypeError(f"Grid.{op}: name must be a str, got {_kind(name)}")
            if name not in names:
                raise ValueError(f"Grid.{op}: {path} holds no grid named {name!r}; its grids are "
                                 f"{names}")
            b = names.index(name)
        else:
            b = _int_arg(f"Grid.{op}", "index", index)
            if not -batch.num_grids <= b < batch.num_grids:
                raise IndexError(f"Grid.{op}: index {b} out of range for the {batch.num_grids} "
                                 f"grids of {path}")
            b %= batch.num_grids
        if len(features) > 1:
            raise ValueError(f"Grid.{op}: {path} stores {len(features)} feature arrays a grid; "
                             f"Grid.from_nanovdb returns one: read the file with tg.load")
        if features:
            data = features[0][b]
        else:
            data = torch.empty(0, device=batch.device)
        if verbose:
            print(f"from_nanovdb: grid {b} ({names[b]!r}) of {path}, "
                  f"{batch.num_voxels_at(b)} voxels")
        return cls(batch[b]), data, names[b]

    # ---------------------------------------------------------------- properties

    @property
    def device(self) -> torch.device:
        """The device the grid lives on."""
        return self._grid_batch.device

    @property
    def num_voxels(self) -> int:
        """The number of active voxels (the rows of the grid's features)."""
        return self._grid_batch.total_voxels

    @property
    def voxel_size(self) -> torch.Tensor:
        """float64 [3] on the grid's device: the world size of a voxel along each axis."""
        return self._grid_batch.voxel_sizes[0].to(self.device)

    @property
    def origin(self) -> torch.Tensor:
        """float64 [3] on the grid's device: the world position of voxel (0, 0, 0)'s centre."""
        return self._grid_batch.origins[0].to(self.device)

    @property
    def bbox(self) -> torch.Tensor:
        """int32 [2, 3] on the grid's device: the lowest and highest active ijk (inclusive),
        zeros for a grid without voxels."""
        return self._grid_batch.bboxes[0]

    @property
    def dual_bbox(self) -> torch.Tensor:
        """int32 [2, 3] on the grid's device: the bounding box of the dual grid (bbox with its
        upper corner + 1), zeros for a grid without voxels."""
        return self._grid_batch.dual_bboxes[0]

    @property
    def ijk(self) -> torch.Tensor:
        """int32 [num_voxels, 3] on the grid's device: the active voxels' coordinates in row
        order."""
        return self._grid_batch.ijk.jdata

    @property
    def voxel_to_world_matrix(self) -> torch.Tensor:
        """float32 [4, 4] on the grid's device: world = M @ (i, j, k, 1)."""
        return self._grid_batch.voxel_to_world_matrices[0]

    @property
    def world_to_voxel_matrix(self) -> torch.Tensor:
        """float32 [4, 4] on the grid's device: (i, j, k, 1) = M @ world, the inverse of
        voxel_to_world_matrix."""
        return self._grid_batch.world_to_voxel_matrices[0]

    @property
    def num_bytes(self) -> int:
        """The bytes of the grid's nodes and of its entries in the tree's offset tables (as
        GridBatch.num_bytes)."""
        return int(self._grid_batch.num_bytes[0])

    @property
    def num_leaf_nodes(self) -> int:
        """The grid's leaves (8^3 blocks that hold an active voxel)."""
        return self._grid_batch.total_leaf_nodes

    @property
    def is_contiguous(self) -> bool:
        """Always True: the grid owns its whole tree."""
        return self._grid_batch.is_contiguous()

    @property
    def has_zero_voxels(self) -> bool:
        """Whether the grid has no active voxel."""
        return self._grid_batch.total_voxels == 0

    @property
    def morton(self) -> torch.Tensor:
        """int64 [num_voxels]: the Z-order codes of the voxels' ijk relative to the grid's
        lowest corner (i in the highest bit of each triple)."""
        return self._grid_batch.morton().jdata

    @property
    def morton_zyx(self) -> torch.Tensor:
        """int64 [num_voxels]: Z-order codes with the axes swapped (k in the highest bit)."""
        return self._grid_batch.morton_zyx().jdata

    @property
    def hilbert(self) -> torch.Tensor:
        """int64 [num_voxels]: the Hilbert-curve codes of the voxels' ijk relative to the
        grid's lowest corner."""
        return self._grid_batch.hilbert().jdata

    @property
    def hilbert_zyx(self) -> torch.Tensor:
        """int64 [num_voxels]: Hilbert-curve codes with the axes swapped."""
        return self._grid_batch.hilbert_zyx().jdata

    # ---------------------------------------------------------------- transforms and queries

    def voxel_to_world(self, ijk: torch.Tensor) -> torch.Tensor:
        """World positions of (possibly fractional) voxel coordinates.

        Args:
            ijk: [N, 3] voxel coordinates (integers are taken as float64).
        """
        return self._grid_batch.voxel_to_world(_one("voxel_to_world", "ijk", ijk)).jdata

    def world_to_voxel(self, points: torch.Tensor) -> torch.Tensor:
        """Fractional voxel coordinates of world points (voxel centres at integers).

        Args:
            points: Float [N, 3] world positions.
        """
        return self._grid_batch.world_to_voxel(_one("world_to_voxel", "points", points)).jdata

    def ijk_to_index(self, ijk: torch.Tensor, cumulative: bool = False) -> torch.Tensor:
        """int64 [N]: the row of each coordinate's voxel, -1 where it is not active.

        Args:
            ijk: Integer [N, 3] voxel coordinates.
            cumulative: Rows in a batch's features; for one grid the same as False.
        """
        return self._grid_batch.ijk_to_index(_one("ijk_to_index", "ijk", ijk), cumulative).jdata

    def ijk_to_inv_index(self, ijk: torch.Tensor, cumulative: bool = False) -> torch.Tensor:
        """int64 [num_voxels]: for each voxel, the row of ijk that names it, -1 where none
        does (of several, the last).

        Args:
            ijk: Integer [N, 3] voxel coordinates.
            cumulative: Rows in a batch's coordinates; for one grid the same as False.
        """
        return self._grid_batch.ijk_to_inv_index(_one("ijk_to_inv_index", "ijk", ijk),
                                                 cumulative).jdata

    def points_in_grid(self, points: torch.Tensor) -> torch.Tensor:
        """bool [N]: whether the voxel containing each world point is active.

        Args:
            points: Float [N, 3] world positions.
        """
        return self._grid_batch.points_in_grid(_one("points_in_grid", "points", points)).jdata

    def coords_in_grid(self, ijk: torch.Tensor) -> torch.Tensor:
        """bool [N]: whether each coordinate is an active voxel.

        Args:
            ijk: Integer [N, 3] voxel coordinates.
        """
        return self._grid_batch.coords_in_grid(_one("coords_in_grid", "ijk", ijk)).jdata

    def cubes_in_grid(self, cube_centers: torch.Tensor, cube_min=0.0,
                      cube_max=0.0) -> torch.Tensor:
        """bool [N]: whether each cube lies wholly in active voxels.

        Args:
            cube_centers: Float [N, 3] world centres of the cubes.
            cube_min: The cubes' lowest corner relative to the centre: a number or three;
                default 0.
            cube_max: Their highest corner relative to the centre: a number or three;
                default 0.
        """
        op = "cubes_in_grid"
        return self._grid_batch.cubes_in_grid(_one(op, "cube_centers", cube_centers),
                                              cube_min, cube_max).jdata

    def cubes_intersect_grid(self, cube_centers: torch.Tensor, cube_min=0.0,
                             cube_max=0.0) -> torch.Tensor:
        """bool [N]: whether each cube touches an active voxel.

        Args:
            cube_centers: Float [N, 3] world centres of the cubes.
            cube_min: The cubes' lowest corner relative to the centre: a number or three;
                default 0.
            cube_max: Their highest corner relative to the centre: a number or three;
                default 0.
        """
        op = "cubes_intersect_grid"
        return self._grid_batch.cubes_intersect_grid(_one(op, "cube_centers", cube_centers),
                                                     cube_min, cube_max).jdata

    def neighbor_indexes(self, ijk: torch.Tensor, extent: int, bitshift: int = 0) -> torch.Tensor:
        """int64 [N, 2 extent + 1, 2 extent + 1, 2 extent + 1]: the rows of the voxels within
        extent of each coordinate (-1 where inactive).

        Args:
            ijk: Integer [N, 3] voxel coordinates.
            extent: The neighbourhood's reach along each axis, in voxels.
            bitshift: Shift the coordinates left by this many bits first; default 0.
        """
        return self._grid_batch.neighbor_indexes(_one("neighbor_indexes", "ijk", ijk), extent,
                                                 bitshift).jdata

    # ---------------------------------------------------------------- derived grids

    def coarsened_grid(self, coarsening_factor) -> Grid:
        """The grid with each block of coarsening_factor^3 voxels merged into one.

        Args:
            coarsening_factor: The block size: an int or three, each >= 1.
        """
        return Grid(self._grid_batch.coarsened_grid(coarsening_factor))

    def refined_grid(self, subdiv_factor, mask: Optional[torch.Tensor] = None) -> Grid:
        """The grid with each voxel split into subdiv_factor^3.

        Args:
            subdiv_factor: The split along each axis: an int or three, each >= 1.
            mask: None (default: every voxel), or bool [num_voxels]: only the voxels where it
                is set are split (the others are dropped).
        """
        mask = _optional_tensor("refined_grid", "mask", mask)
        return Grid(self._grid_batch.refined_grid(subdiv_factor, mask))

    def dual_grid(self, exclude_border: bool = False) -> Grid:
        """The grid of the corners of this grid's voxels (origin shifted by half a voxel).

        Args:
            exclude_border: False (default): every corner of every voxel; True: only corners
                whose 8 surrounding voxels are all active.
        """
        return Grid(self._grid_batch.dual_grid(exclude_border))

    def dilated_grid(self, dilation: int) -> Grid:
        """The grid of every voxel within dilation voxels (per axis) of an active one.

        Args:
            dilation: The reach, in voxels.
        """
        return Grid(self._grid_batch.dilated_grid(dilation))

    def merged_grid(self, other: Grid) -> Grid:
        """The union of this grid's and other's voxels, with this grid's voxel size and
        origin.

        Args:
            other: The other Grid.
        """
        return Grid(self._grid_batch.merged_grid(_batch("merged_grid", "other", other)))

    def pruned_grid(self, mask: torch.Tensor) -> Grid:
        """The grid of the voxels where mask is set.

        Args:
            mask: bool [num_voxels].
        """
        return Grid(self._grid_batch.pruned_grid(_tensor("pruned_grid", "mask", mask)))

    def clipped_grid(self, ijk_min, ijk_max) -> Grid:
        """The grid of the voxels inside the box [ijk_min, ijk_max] (both included).

        Args:
            ijk_min: The box's lowest voxel: an int or three.
            ijk_max: Its highest voxel: an int or three.
        """
        op = "clipped_grid"
        return Grid(self._grid_batch.clipped_grid(_vec3(op, "ijk_min", ijk_min),
                                                  _vec3(op, "ijk_max", ijk_max)))

    def clip(self, features: torch.Tensor, ijk_min, ijk_max) -> tuple[torch.Tensor, Grid]:
        """(features, grid): clipped_grid(ijk_min, ijk_max) and the rows of features of the
        voxels it keeps. Differentiable in features.

        Args:
            features: [num_voxels, ...] per-voxel features.
            ijk_min: The box's lowest voxel: an int or three.
            ijk_max: Its highest voxel: an int or three.
        """
        op = "clip"
        return _plain(self._grid_batch.clip(_tensor(op, "features", features),
                                            _vec3(op, "ijk_min", ijk_min),
                                            _vec3(op, "ijk_max", ijk_max)))

    def contiguous(self) -> Grid:
        """This grid (a grid owns its whole tree, so it is contiguous already)."""
        return self

    def conv_grid(self, kernel_size, stride=1) -> Grid:
        """The voxels a sparse convolution of this grid writes (as GridBatch.conv_grid).

        Args:
            kernel_size: The kernel's size: an int or three.
            stride: The convolution's stride: an int or three; default 1.
        """
        return Grid(self._grid_batch.conv_grid(kernel_size, stride))

    def conv_transpose_grid(self, kernel_size, stride=1) -> Grid:
        """The voxels a transposed sparse convolution of this grid writes.

        Args:
            kernel_size: The kernel's size: an int or three.
            stride: The convolution's stride: an int or three; default 1.
        """
        return Grid(self._grid_batch.conv_transpose_grid(kernel_size, stride))

    # ---------------------------------------------------------------- sampling and splatting

    def _sampled(self, op: str, points, voxel_data):
        """GridBatch's op(points, voxel_data) for tensors, unwrapped."""
        method = getattr(self._grid_batch, op)
        return _plain(method(_one(op, "points", points), _tensor(op, "voxel_data", voxel_data)))

    def sample_nearest(self, points: torch.Tensor, voxel_data: torch.Tensor) -> torch.Tensor:
        """[N, ...]: the features of the active voxel nearest each world point among the 8
        around it, zero where none is. Differentiable in voxel_data.

        Args:
            points: Float [N, 3] world positions.
            voxel_data: [num_voxels, ...] per-voxel features.
        """
        return self._sampled("sample_nearest", points, voxel_data)

    def sample_trilinear(self, points: torch.Tensor, voxel_data: torch.Tensor) -> torch.Tensor:
        """[N, ...]: the features trilinearly interpolated at the world points (inactive
        voxels count as zero). Differentiable in voxel_data and points.

        Args:
            points: Float [N, 3] world positions.
            voxel_data: [num_voxels, ...] per-voxel features.
        """
        return self._sampled("sample_trilinear", points, voxel_data)

    def sample_trilinear_with_grad(self, points: torch.Tensor, voxel_data: torch.Tensor
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values ``[N, *C]``, gradients ``[N, *C, 3]``): sample_trilinear and the gradient
        of the interpolated field with respect to the world position.

        Args:
            points: Float [N, 3] world positions.
            voxel_data: ``[num_voxels, *C]`` per-voxel features.
        """
        return self._sampled("sample_trilinear_with_grad", points, voxel_data)

    def sample_bezier(self, points: torch.Tensor, voxel_data: torch.Tensor) -> torch.Tensor:
        """[N, ...]: the features interpolated at the world points with quadratic B-spline
        ("Bezier") weights over the 3x3x3 voxels around each. Differentiable.

        Args:
            points: Float [N, 3] world positions.
            voxel_data: [num_voxels, ...] per-voxel features.
        """
        return self._sampled("sample_bezier", points, voxel_data)

    def sample_bezier_with_grad(self, points: torch.Tensor, voxel_data: torch.Tensor
                                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values ``[N, *C]``, gradients ``[N, *C, 3]``): sample_bezier and the gradient of
        the interpolated field with respect to the world position.

        Args:
            points: Float [N, 3] world positions.
            voxel_data: ``[num_voxels, *C]`` per-voxel features.
        """
        return self._sampled("sample_bezier_with_grad", points, voxel_data)

    def splat_trilinear(self, points: torch.Tensor, points_data: torch.Tensor) -> torch.Tensor:
        """[num_voxels, ...]: each point's values spread over the 8 voxels around it with
        trilinear weights. Differentiable in points_data.

        Args:
            points: Float [N, 3] world positions.
            points_data: [N, ...] values, a row a point.
        """
        op = "splat_trilinear"
        return self._grid_batch.splat_trilinear(_one(op, "points", points),
                                                _tensor(op, "points_data", points_data)).jdata

    def splat_bezier(self, points: torch.Tensor, points_data: torch.Tensor) -> torch.Tensor:
        """[num_voxels, ...]: each point's values spread over the voxels with sample_bezier's
        weights (its adjoint). Differentiable in points_data and points.

        Args:
            points: Float [N, 3] world positions.
            points_data: [N, ...] values, a row a point.
        """
        op = "splat_bezier"
        return self._grid_batch.splat_bezier(_one(op, "points", points),
                                             _tensor(op, "points_data", points_data)).jdata

    # ---------------------------------------------------------------- pooling and refinement

    def avg_pool(self, pool_factor, data: torch.Tensor, stride=0,
                 coarse_grid: Optional[Grid] = None) -> tuple[torch.Tensor, Grid]:
        """(pooled [coarse voxels, ...], coarse grid): the mean of each window of pool_factor
        voxels over its active ones. Differentiable in data.

        Args:
            pool_factor: The window: an int or three.
            data: [num_voxels, ...] per-voxel features.
            stride: The windows' spacing: an int or three; 0 (default) is pool_factor.
            coarse_grid: The Grid to pool into; default coarsened_grid(stride or pool_factor).
        """
        op = "avg_pool"
        return _plain(self._grid_batch.avg_pool(pool_factor, _tensor(op, "data", data), stride,
                                                _optional_batch(op, "coarse_grid", coarse_grid)))

    def max_pool(self, pool_factor, data: torch.Tensor, stride=0,
                 coarse_grid: Optional[Grid] = None) -> tuple[torch.Tensor, Grid]:
        """(pooled [coarse voxels, ...], coarse grid): the max of each window of pool_factor
        voxels over its active ones. Differentiable in data.

        Args:
            pool_factor: The window: an int or three.
            data: [num_voxels, ...] per-voxel features.
            stride: The windows' spacing: an int or three; 0 (default) is pool_factor.
            coarse_grid: The Grid to pool into; default coarsened_grid(stride or pool_factor).
        """
        op = "max_pool"
        return _plain(self._grid_batch.max_pool(pool_factor, _tensor(op, "data", data), stride,
                                                _optional_batch(op, "coarse_grid", coarse_grid)))

    def refine(self, subdiv_factor, data: torch.Tensor, mask: Optional[torch.Tensor] = None,
               refined: Optional[Grid] = None) -> tuple[torch.Tensor, Grid]:
        """(fine data, fine grid): each fine voxel takes its parent's row of data
        (nearest-neighbour upsampling). Differentiable in data.

        Args:
            subdiv_factor: The split along each axis: an int or three.
            data: [num_voxels, ...] per-voxel features.
            mask: None, or bool [num_voxels]: only these voxels are refined (read only to
                build the fine grid).
            refined: The fine Grid to fill; default refined_grid(subdiv_factor, mask). Its
                voxels without a parent here get zeros.
        """
        op = "refine"
        return _plain(self._grid_batch.refine(subdiv_factor, _tensor(op, "data", data),
                                              _optional_tensor(op, "mask", mask),
                                              _optional_batch(op, "refined", refined)))

    # ---------------------------------------------------------------- rays

    def voxels_along_rays(self, ray_origins: torch.Tensor, ray_directions: torch.Tensor,
                          max_voxels: int, eps: float = 0.0,
                          return_ijk: bool = False) -> tuple[JaggedTensor, JaggedTensor]:
        """(voxels, times), one JaggedTensor entry a ray: the first max_voxels active voxels
        each ray crosses, in order, as rows (or int32 ijk [n, 3] with return_ijk), and
        [n, 2] times at which the ray enters and leaves each.

        Args:
            ray_origins: Float [N, 3] world origins.
            ray_directions: [N, 3] directions (origin + t * direction, t >= 0).
            max_voxels: The most voxels a ray.
            eps: Crossings no longer than eps are left out; default 0.
            return_ijk: False (default, fVDB's for one grid): rows; True: coordinates.
        """
        op = "voxels_along_rays"
        return self._grid_batch.voxels_along_rays(
            _one(op, "ray_origins", ray_origins), _one(op, "ray_directions", ray_directions),
            max_voxels, eps, return_ijk)

    def segments_along_rays(self, ray_origins: torch.Tensor, ray_directions: torch.Tensor,
                            max_segments: int, eps: float = 0.0) -> JaggedTensor:
        """One JaggedTensor entry a ray: [n, 2] start and end t of the first max_segments runs
        of consecutive active voxels the ray crosses.

        Args:
            ray_origins: Float [N, 3] world origins.
            ray_directions: [N, 3] directions.
            max_segments: The most segments a ray.
            eps: Crossings no longer than eps are left out; default 0.
        """
        op = "segments_along_rays"
        return self._grid_batch.segments_along_rays(
            _one(op, "ray_origins", ray_origins), _one(op, "ray_directions", ray_directions),
            max_segments, eps)

    def uniform_ray_samples(self, ray_origins: torch.Tensor, ray_directions: torch.Tensor,
                            t_min, t_max, step_size: float, cone_angle: float = 0.0,
                            include_end_segments: bool = True, return_midpoints: bool = False,
                            eps: float = 0.0) -> JaggedTensor:
        """One JaggedTensor entry a ray: sample intervals [n, 2] (or midpoints [n]) along the
        ray inside its segments of active voxels between t_min and t_max (as
        GridBatch.uniform_ray_samples).

        Args:
            ray_origins: Float [N, 3] world origins.
            ray_directions: [N, 3] directions.
            t_min: Where sampling starts: a [N] tensor or a number for every ray.
            t_max: Where it stops: a [N] tensor or a number.
            step_size: The interval length (at least).
            cone_angle: Steps grow to t * cone_angle where that is longer; default 0.
            include_end_segments: Keep the parts of intervals that cross a segment's end;
                default True.
            return_midpoints: Return each interval's midpoint instead; default False.
            eps: Segments no longer than eps are left out; default 0.
        """
        op = "uniform_ray_samples"
        for name, value in (("t_min", t_min), ("t_max", t_max)):
            if not isinstance(value, (torch.Tensor, int, float)) or isinstance(value, bool):
                raise TypeError(f"Grid.{op}: {name} must be a torch.Tensor [N] or a number, got "
                                f"{_kind(value)}")
        return self._grid_batch.uniform_ray_samples(
            _one(op, "ray_origins", ray_origins), _one(op, "ray_directions", ray_directions),
            t_min, t_max, step_size, cone_angle, include_end_segments, return_midpoints, eps)

    def ray_implicit_intersection(self, ray_origins: torch.Tensor, ray_directions: torch.Tensor,
                                  grid_scalars: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
        """[N]: t of each ray's first zero crossing of the per-voxel field grid_scalars, -1
        where there is none.

        Args:
            ray_origins: Float [N, 3] world origins.
            ray_directions: [N, 3] directions.
            grid_scalars: [num_voxels] or [num_voxels, 1], one value a voxel.
            eps: Passed to the march; default 0.
        """
        op = "ray_implicit_intersection"
        return self._grid_batch.ray_implicit_intersection(
            _one(op, "ray_origins", ray_origins), _one(op, "ray_directions", ray_directions),
            _tensor(op, "grid_scalars", grid_scalars), eps).jdata

    def rays_intersect_voxels(self, ray_origins: torch.Tensor, ray_directions: torch.Tensor,
                              eps: float = 0.0) -> torch.Tensor:
        """bool [N]: whether each ray crosses an active voxel over more than eps of t.

        Args:
            ray_origins: Float [N, 3] world origins.
            ray_directions: [N, 3] directions.
            eps: The shortest crossing that counts; default 0.
        """
        op = "rays_intersect_voxels"
        return self._grid_batch.rays_intersect_voxels(
            _one(op, "ray_origins", ray_origins), _one(op, "ray_directions", ray_directions),
            eps).jdata

    # ---------------------------------------------------------------- dense volumes

    def inject_from_dense_cminor(self, dense_data: torch.Tensor, dense_origin=0) -> torch.Tensor:
        """``[num_voxels, *C]``: the voxels' features read from a dense volume
        ``[1, X, Y, Z, *C]`` (fVDB's leading 1); zeros for voxels outside it. Differentiable.

        Args:
            dense_data: The volume, ``[1, X, Y, Z, *C]``, on the grid's device.
            dense_origin: The voxel at the volume's index (0, 0, 0): an int or three;
                default 0.
        """
        op = "inject_from_dense_cminor"
        return self._grid_batch.inject_from_dense_cminor(
            _tensor(op, "dense_data", dense_data), _vec3(op, "dense_origin", dense_origin)).jdata

    def inject_from_dense_cmajor(self, dense_data: torch.Tensor, dense_origin=0) -> torch.Tensor:
        """As inject_from_dense_cminor, from a channels-first volume ``[1, *C, X, Y, Z]``.

        Args:
            dense_data: The volume, ``[1, *C, X, Y, Z]``, on the grid's device.
            dense_origin: The voxel at the volume's index (0, 0, 0): an int or three;
                default 0.
        """
        op = "inject_from_dense_cmajor"
        return self._grid_batch.inject_from_dense_cmajor(
            _tensor(op, "dense_data", dense_data), _vec3(op, "dense_origin", dense_origin)).jdata

    def inject_to_dense_cminor(self, sparse_data: torch.Tensor, min_coord=None,
                               grid_size=None) -> torch.Tensor:
        """``[1, X, Y, Z, *C]`` (fVDB's leading 1): the features written into a dense volume,
        zeros where no voxel is. Differentiable.

        Args:
            sparse_data: ``[num_voxels, *C]`` per-voxel features.
            min_coord: The voxel at the volume's index (0, 0, 0): an int or three; default the
                lowest corner of bbox.
            grid_size: The volume's size: an int or three; default bbox's extent.
        """
        op = "inject_to_dense_cminor"
        if min_coord is not None:
            _vec3(op, "min_coord", min_coord)
        return self._grid_batch.inject_to_dense_cminor(_tensor(op, "sparse_data", sparse_data),
                                                       min_coord, grid_size)

    def inject_to_dense_cmajor(self, sparse_data: torch.Tensor, min_coord=None,
                               grid_size=None) -> torch.Tensor:
        """As inject_to_dense_cminor, channels first: ``[1, *C, X, Y, Z]``.

        Args:
            sparse_data: ``[num_voxels, *C]`` per-voxel features.
            min_coord: The voxel at the volume's index (0, 0, 0): an int or three; default the
                lowest corner of bbox.
            grid_size: The volume's size: an int or three; default bbox's extent.
        """
        op = "inject_to_dense_cmajor"
        if min_coord is not None:
            _vec3(op, "min_coord", min_coord)
        return self._grid_batch.inject_to_dense_cmajor(_tensor(op, "sparse_data", sparse_data),
                                                       min_coord, grid_size)

    # ---------------------------------------------------------------- features between grids

    def inject_from(self, src_grid: Grid, src: torch.Tensor, dst: Optional[torch.Tensor] = None,
                    default_value=0) -> torch.Tensor:
        """[num_voxels, ...]: this grid's features with src_grid's features src copied in at
        the voxels both have (voxel space; the transforms are not applied). Differentiable in
        src and dst.

        Args:
            src_grid: The Grid read.
            src: [src_grid.num_voxels, ...] its features.
            dst: [num_voxels, ...] this grid's features, written in place (a non-leaf tensor
                if it requires grad); None (default): a new tensor of default_value.
            default_value: The value of the voxels src_grid lacks, when dst is None.
        """
        op = "inject_from"
        return _plain(self._grid_batch.inject_from(
            _batch(op, "src_grid", src_grid), _tensor(op, "src", src),
            _optional_tensor(op, "dst", dst), default_value))

    def inject_to(self, dst_grid: Grid, src: torch.Tensor, dst: Optional[torch.Tensor] = None,
                  default_value=0) -> torch.Tensor:
        """[dst_grid.num_voxels, ...]: this grid's features src copied into dst_grid's voxels
        that this grid has. Differentiable in src and dst.

        Args:
            dst_grid: The Grid written.
            src: [num_voxels, ...] this grid's features.
            dst: [dst_grid.num_voxels, ...] dst_grid's features, written in place; None
                (default): a new tensor of default_value.
            default_value: The value of dst_grid's voxels this grid lacks, when dst is None.
        """
        op = "inject_to"
        return _plain(self._grid_batch.inject_to(
            _batch(op, "dst_grid", dst_grid), _tensor(op, "src", src),
            _optional_tensor(op, "dst", dst), default_value))

    def inject_from_ijk(self, src_ijk: torch.Tensor, src: torch.Tensor,
                        dst: Optional[torch.Tensor] = None, default_value=0) -> torch.Tensor:
        """[num_voxels, ...]: this grid's features with src, given at the coordinates src_ijk,
        copied in at those that are active. Differentiable in src and dst.

        Args:
            src_ijk: Integer [M, 3] coordinates (each once).
            src: [M, ...] their features.
            dst: [num_voxels, ...] this grid's features, written in place; None (default): a
                new tensor of default_value.
            default_value: The value of the voxels src_ijk does not name, when dst is None.
        """
        op = "inject_from_ijk"
        return _plain(self._grid_batch.inject_from_ijk(
            _one(op, "src_ijk", src_ijk), _tensor(op, "src", src),
            _optional_tensor(op, "dst", dst), default_value))

    # ---------------------------------------------------------------- meshing and TSDF

    def marching_cubes(self, field: torch.Tensor, level: float = 0.0
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(vertices [V, 3], faces int64 [F, 3], normals [V, 3]): the surface where the
        per-voxel field crosses level, over the cubes of 8 active voxel centres (as
        GridBatch.marching_cubes: the third result is the vertex normals, pointing where the
        field is above level).

        Args:
            field: float32 or float64 [num_voxels] or [num_voxels, 1].
            level: The iso-value; default 0.
        """
        return _plain(self._grid_batch.marching_cubes(_tensor("marching_cubes", "field", field),
                                                      level))

    def integrate_tsdf(self, truncation_distance: float, projection_matrices: torch.Tensor,
                       cam_to_world_matrices: torch.Tensor, tsdf: torch.Tensor,
                       weights: torch.Tensor, depth_images: torch.Tensor,
                       weight_images: Optional[torch.Tensor] = None
                       ) -> tuple[Grid, torch.Tensor, torch.Tensor]:
        """(grid, tsdf, weights): a depth image fused into this grid, which grows by the
        truncation band around the measured surface (as GridBatch.integrate_tsdf).

        Args:
            truncation_distance: The band's half-width, in world units (> 0).
            projection_matrices: The camera's pinhole intrinsics, [3, 3] (or [1, 3, 3]).
            cam_to_world_matrices: The camera's pose, a rigid [4, 4] (or [1, 4, 4]).
            tsdf: [num_voxels] or [num_voxels, 1] current signed distances.
            weights: [num_voxels] or [num_voxels, 1] current weights.
            depth_images: The depth image, [H, W] (or [1, H, W]), float32 or float64.
            weight_images: None, or per-pixel weights shaped as depth_images.
        """
        op = "integrate_tsdf"
        if weight_images is not None:
            weight_images = _leading_one(op, "weight_images", weight_images, 2)
        return _plain(self._grid_batch.integrate_tsdf(
            truncation_distance,
            _leading_one(op, "projection_matrices", projection_matrices, 2),
            _leading_one(op, "cam_to_world_matrices", cam_to_world_matrices, 2),
            _tensor(op, "tsdf", tsdf), _tensor(op, "weights", weights),
            _leading_one(op, "depth_images", depth_images, 2), weight_images))

    # ---------------------------------------------------------------- devices and files

    def cpu(self) -> Grid:
        """This grid on the CPU (a copy; self when it is there already)."""
        return self.to("cpu")

    def cuda(self) -> Grid:
        """This grid on the current CUDA device (a copy; self when it is there already)."""
        return self.to("cuda")

    def to(self, target) -> Grid:
        """This grid on another device (a copy; self when it is there already).

        Args:
            target: The device: a str or torch.device, or a torch.Tensor, JaggedTensor, Grid or
                GridBatch whose device to take.
        """
        if isinstance(target, (str, torch.device)):
            device = torch.device(target)
        elif isinstance(target, torch.Tensor):
            device = target.device
        elif isinstance(target, JaggedTensor):
            device = target.jdata.device
        elif isinstance(target, (Grid, GridBatch)):
            device = target.device
        else:
            raise TypeError(f"Grid.to: target must be a device, a str, a torch.Tensor, a "
                            f"JaggedTensor, a Grid or a GridBatch, got {_kind(target)}")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device == self.device:
            return self
        return Grid(self._grid_batch.to(device))

    def save_nanovdb(self, path, data: Optional[torch.Tensor] = None, name: Optional[str] = None,
                     compressed: bool = False, verbose: bool = False) -> None:
        """Writes this grid and its features to a .nvdb file (tg.save; read it back with
        from_nanovdb or tg.load).

        Args:
            path: The file to write (a str or os.PathLike).
            data: None, or [num_voxels, ...] per-voxel features.
            name: The grid's name in the file; default "grid_0".
            compressed: Must be False: tilegrid writes uncompressed files.
            verbose: Print what was written.
        """
        op = "save_nanovdb"
        if name is not None and not isinstance(name, str):
            raise TypeError(f"Grid.{op}: name must be a str, got {_kind(name)}")
        self._grid_batch.save_nanovdb(path, _optional_tensor(op, "data", data), name=name,
                                      compressed=compressed, verbose=verbose)

    # ---------------------------------------------------------------- identity

    def is_same(self, other: Grid) -> bool:
        """Whether other is a Grid of the same tree.

        Args:
            other: Another Grid.
        """
        return isinstance(other, Grid) and self._grid_batch.is_same(other._grid_batch)

    def has_same_address_and_grid_count(self, other: Any) -> bool:
        """Whether other is a Grid, or a GridBatch of one grid, of the same tree.

        Args:
            other: Anything.
        """
        if isinstance(other, Grid):
            other = other._grid_batch
        return self._grid_batch.has_same_address_and_grid_count(other)

    def __repr__(self) -> str:
        return (f"Grid(num_voxels={self.num_voxels}, voxel_size={self.voxel_size.tolist()}, "
                f"origin={self.origin.tolist()}, device={self.device})")
