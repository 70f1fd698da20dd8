"""Saving and loading grid batches with their features as NanoVDB files (.nvdb), in the
spirit of fVDB's save/load.

Each grid becomes one NanoVDB index grid named "grid_<b>" unless names are given, in NanoVDB
32.9's format (NanoVDB 32.5 and later, and fVDB) or, with nanovdb_version="32.4", in 32.4's
(NanoVDB 32.4's tools, Debian's): each kind of reader accepts the other's files but misreads
or refuses their index grids. ``load`` reads both. NanoVDB reserves index 0 for the
background: the voxel in row r of grid b's features has NanoVDB index r + 1. Each feature
tensor is stored as a channel array of every grid (details in include/tilegrid/grid/nvdb_io.h).

    tg.save("scene.nvdb", grid, features=[colors, density], names=["room", "hall"])
    grid, (colors, density), names = tg.load("scene.nvdb", device="cuda")
"""

from __future__ import annotations

import os
from typing import Optional, Sequence, Union

import torch

from .. import _C
from .batch import GridBatch
from .jagged_tensor import JaggedTensor

Features = Union[None, JaggedTensor, torch.Tensor, Sequence[Union[JaggedTensor, torch.Tensor]]]


_FEATURE_DTYPES = (torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                   torch.float32, torch.float64)


def _feature_capsule(grid: GridBatch, k: int, f) -> object:
    if isinstance(f, JaggedTensor):
        if not torch.equal(f.joffsets.cpu(), grid.voxel_offsets.cpu()):
            raise ValueError(
                f"save: features[{k}] is jagged as {f.joffsets.tolist()} but the grid's voxels as "
                f"{grid.voxel_offsets.tolist()}"
            )
        f = f.jdata
    if not isinstance(f, torch.Tensor):
        raise TypeError(
            f"save: features[{k}] must be a torch.Tensor or JaggedTensor, got {type(f).__name__}"
        )
    if f.dtype not in _FEATURE_DTYPES:  # int16 or complex would fail in DLPack, naming nothing
        raise TypeError(f"save: features[{k}] must be bool, uint8, int32, int64, float16, bfloat16, "
                        f"float32 or float64, got {str(f.dtype).removeprefix('torch.')}")
    # Stream-ordered copy to the host here, so the C++ writer reads finished host memory.
    return f.detach().cpu().contiguous().__dlpack__()


def _path(op: str, path) -> str:
    """path as a str (a str or an os.PathLike of str; bytes paths are not taken by the C++
    side, which would answer with its signature)."""
    try:
        p = os.fspath(path)
    except TypeError:
        raise TypeError(f"{op}: path must be a str or os.PathLike, got {type(path).__name__}") from None
    if not isinstance(p, str):
        raise TypeError(f"{op}: path must be a str or an os.PathLike of str, got {type(p).__name__}")
    return p


def save(
    path: Union[str, os.PathLike],
    grid: GridBatch,
    features: Features = None,
    names: Union[None, str, Sequence[str]] = None,
    nanovdb_version: str = "32.9",
) -> None:
    """Write `grid` and its per-voxel features to a .nvdb file, replacing it.

    Args:
        path: The file to write (a str or os.PathLike).
        grid: The GridBatch; a batch on a GPU is copied to the host first.
        features: None, a [total_voxels, ...] tensor or JaggedTensor (bool, uint8, int32,
            int64, float16, bfloat16, float32 or float64), or a list of them; each is saved
            with its dtype and per-voxel shape. A JaggedTensor must be jagged like the grid's
            voxels.
        names: One name per grid, or one name for every grid; default "grid_<b>".
        nanovdb_version: The NanoVDB format to write: "32.9" (the default; NanoVDB 32.5 and
            later, and fVDB, which read a 32.4 file's index grids with their own layout and
            misnumber its voxels) or "32.4" (NanoVDB 32.4's tools, Debian's, which refuse a
            32.9 file).
    """
    if nanovdb_version not in ("32.4", "32.9"):
        raise ValueError(f'save: nanovdb_version must be "32.4" or "32.9", got {nanovdb_version!r}')
    if not isinstance(grid, GridBatch):
        raise TypeError(f"save: grid must be a GridBatch, got {type(grid).__name__}")
    if features is None:
        features = []
    elif isinstance(features, (torch.Tensor, JaggedTensor)):
        features = [features]
    capsules = [_feature_capsule(grid, k, f) for k, f in enumerate(features)]
    if names is None:
        names = []
    elif isinstance(names, str):
        names = [names] * grid.num_grids
    names = list(names)
    for k, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"save: names[{k}] must be a str, got {type(name).__name__} ({name!r})")
    host = grid if grid.device.type == "cpu" else grid.cpu()
    _C.save_nvdb(_path("save", path), host._impl, capsules, names, nanovdb_version == "32.9")


def load(
    path: Union[str, os.PathLike], device: Union[str, torch.device] = "cpu"
) -> tuple[GridBatch, list[JaggedTensor], list[str]]:
    """Read a .nvdb file written by save, by fVDB's save or by NanoVDB (file format 32.0-32.9).

    Index grids (Index, OnIndex) load with the channel arrays of their blind data as features
    (and fVDB's tensor record, for its grids of class TensorGrid); grids of values (Float,
    Double, Int32, Int64, UInt8, Vec3f, Vec3d, Vec4f, Vec4d, RGBA8) load with their voxels'
    values as one feature, shaped as fVDB's record says where it has one. Files compressed
    with ZIP or BLOSC load where this build has zlib or c-blosc
    (``tilegrid.info.build_info()["nvdb_codecs"]``). Grids with active tiles (one value over
    a block) are refused.

    Args:
        path: The file to read (a str or os.PathLike).
        device: Where the batch and its features are put; default "cpu".

    Returns:
        (grid, features, names): the batch on `device`, one JaggedTensor per stored feature
        ([total_voxels, ...], jagged like the grid's voxels; an empty list when there are
        none), and the grid names.

    Raises:
        ValueError: any file it cannot read, whatever its bytes (the message names the
            file, the grid and what was expected and found; names must be UTF-8).
        RuntimeError: the file cannot be opened.

    Time and memory are bounded by the file's size.
    """
    impl, capsules, names = _C.load_nvdb(_path("load", path))
    grid = GridBatch(impl)
    offsets = grid.voxel_offsets
    features = [JaggedTensor.from_data_and_offsets(torch.from_dlpack(c), offsets) for c in capsules]
    device = torch.device(device)
    if device.type != "cpu":
        grid = grid.to(device)
        features = [f.to(device) for f in features]
    return grid, features, list(names)
