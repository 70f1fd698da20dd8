"""Argument checks shared by the grid ops written as torch ops over the grid's lookups
(spline.py, queries.py)."""

from __future__ import annotations

import torch

from .jagged_tensor import JaggedTensor

# Continuous voxel coordinates are clamped to this before they are floored into int64: further
# out is in no grid (int32 coordinates), and the clamp keeps weights finite there.
FAR = 2.0**40


def on_device(device: torch.device, t: torch.Tensor) -> bool:
    """Whether t is on `device` (a CUDA device's index included)."""
    same_index = device.type != "cuda" or t.device.index == device.index
    return t.device.type == device.type and same_index


def check_vectors(op: str, name: str, grid, value) -> JaggedTensor:
    """value, checked: a JaggedTensor of one [N_b, 3] floating tensor a grid, on the grid's
    device, finite (checked in eager mode outside CUDA graph capture: one flag read back)."""
    if not isinstance(value, JaggedTensor):
        raise TypeError(f"{op}: {name} must be a JaggedTensor, got {type(value).__name__}")
    if value.num_tensors != grid.num_grids:
        raise ValueError(f"{op}: {name} holds {value.num_tensors} tensors but the grid batch has "
                         f"{grid.num_grids} grids")
    p = value.jdata
    if not p.is_floating_point():
        raise TypeError(f"{op}: {name} must be floating point, got {p.dtype}")
    if p.dim() != 2 or p.shape[1] != 3:
        raise ValueError(f"{op}: {name} must be [N, 3], got {list(p.shape)}")
    if not on_device(grid.device, p):
        raise ValueError(f"{op}: {name} is on {p.device} but the grid is on {grid.device}")
    capturing = p.is_cuda and torch.cuda.is_current_stream_capturing()
    if not torch.compiler.is_compiling() and not capturing and p.numel():
        finite = torch.isfinite(p).all(1)
        if not bool(finite.all()):
            bad = int((~finite).nonzero()[0, 0])
            raise ValueError(f"{op}: {name} must be finite, got {p[bad].tolist()} at row {bad}")
    return value
