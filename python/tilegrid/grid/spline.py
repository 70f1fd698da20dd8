"""Interpolation between points and a GridBatch's voxels with spatial gradients, with fVDB's
names and arguments: trilinear sampling with the gradient of the sampled field
(`sample_trilinear_with_grad`), and quadratic B-spline ("Bezier", fVDB's name) sampling over
the 3x3x3 voxels around a point (`sample_bezier`, `sample_bezier_with_grad`) and its adjoint,
splatting (`splat_bezier`).

Each is torch tensor ops over the grid's lookups (ijk_to_index), so it runs on the grid's
device, CPU or CUDA, and autograd differentiates it in the features and in the points. Voxels
that are not active count as zero.

The quadratic weights are fVDB's: along each axis, for t = u - round(u) in [-0.5, 0.5) (u the
point's continuous voxel coordinate, voxel centres at integers), the voxels at offsets -1, 0
and +1 weigh (t - 1/2)^2, 3/2 - 2 t^2 and (t + 1/2)^2, and a voxel's weight is the product of
its three. They are twice the usual B-spline's along each axis: the 27 weights add up to 8, so
sampling a field that is 1 everywhere gives 8 (as fVDB's). Gradients are with respect to the
world position: d/du divided by the voxel size.
"""

from __future__ import annotations

import itertools
import math

import torch

from .checks import FAR, check_vectors, on_device
from .jagged_tensor import JaggedTensor


_LOW_PRECISION = (torch.float16, torch.bfloat16)



def _check_values(op: str, name: str, values, rows: int, what: str, grid, p: torch.Tensor):
    """values' tensor (a tensor or a JaggedTensor's jdata), checked: floating point [rows, ...]
    on the grid's device, of the points' dtype (or float16 / bfloat16, computed in float32)."""
    if isinstance(values, JaggedTensor):
        values = values.jdata
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor or a JaggedTensor, got "
                        f"{type(values).__name__}")
    if not values.is_floating_point():
        raise TypeError(f"{op}: {name} must be floating point, got {values.dtype}")
    if values.dim() < 1 or values.shape[0] != rows:
        raise ValueError(f"{op}: {name} must have {rows} rows ({what}), got shape "
                         f"{list(values.shape)}")
    if not on_device(grid.device, values):
        raise ValueError(f"{op}: {name} is on {values.device} but the grid is on {grid.device}")
    if values.dtype not in _LOW_PRECISION and values.dtype != p.dtype:
        raise TypeError(f"{op}: points and {name} must have one dtype (float32 or float64; "
                        f"{name} may be float16 or bfloat16), got {p.dtype} and {values.dtype}")
    return values


def _stencil(grid, points: JaggedTensor, p: torch.Tensor, bezier: bool, dtype: torch.dtype):
    """(rows, weights, gradient weights) of the voxels around each point: rows int64 [N, K] in
    the batch's features (-1 where inactive), weights [N, K] and their derivatives with respect
    to the world position [N, K, 3], both 0 where the voxel is inactive, in `dtype`. K is 27
    (bezier) or 8 (trilinear). Differentiable in p."""
    b = points.jidx.long()
    sizes, origins = (t.to(p.device) for t in (grid.voxel_sizes, grid.origins))
    u = ((p.double() - origins[b]) / sizes[b]).clamp(-FAR, FAR)
    if bezier:
        base = torch.floor(u.detach() + 0.5)  # NanoVDB's round: halves up
        t = u - base  # in [-0.5, 0.5)
        # Along each axis, the voxels at offsets -1, 0, +1: [N, 3, 3] (point, axis, offset).
        w1 = torch.stack([(t - 0.5) ** 2, 1.5 - 2 * t * t, (t + 0.5) ** 2], -1)
        dw1 = torch.stack([2 * t - 1, -4 * t, 2 * t + 1], -1)
        steps = (-1, 0, 1)
    else:
        base = torch.floor(u.detach())
        f = u - base  # in [0, 1)
        w1 = torch.stack([1 - f, f], -1)
        dw1 = torch.stack([-torch.ones_like(f), torch.ones_like(f)], -1)
        steps = (0, 1)
    dw1 = dw1 / sizes[b][:, :, None]  # d/du to d/d(world)
    picks = list(itertools.product(range(len(steps)), repeat=3))
    a = torch.tensor(picks, device=p.device, dtype=torch.int64)  # [K, 3]: offset index per axis
    wx, wy, wz = (w1[:, axis, a[:, axis]] for axis in range(3))  # each [N, K]
    dx, dy, dz = (dw1[:, axis, a[:, axis]] for axis in range(3))
    weights = wx * wy * wz
    grads = torch.stack([dx * wy * wz, wx * dy * wz, wx * wy * dz], -1)
    offsets = torch.tensor(steps, device=p.device, dtype=torch.int64)[a]  # [K, 3]
    ijk = base.to(torch.int64)[:, None, :] + offsets[None]
    k = offsets.shape[0]
    queries = JaggedTensor._from_trusted(ijk.reshape(-1, 3), points.joffsets * k)
    rows = grid.ijk_to_index(queries, cumulative=True).jdata.reshape(-1, k)
    active = rows >= 0
    weights = torch.where(active, weights, 0).to(dtype)
    grads = torch.where(active[:, :, None], grads, 0).to(dtype)
    return rows, weights, grads


def _gather(data: torch.Tensor, rows: torch.Tensor, k: int) -> torch.Tensor:
    """data's rows rows[:, k] ([N, C]), zero where rows[:, k] is -1 (an inactive voxel)."""
    r = rows[:, k]
    if data.shape[0] == 0:
        return data.new_zeros(r.shape[0], data.shape[1])
    return torch.where((r >= 0)[:, None], data[r.clamp(min=0)], 0)


def _sample(op: str, grid, points, voxel_data, bezier: bool, with_grad: bool):
    p = check_vectors(op, "points", grid, points).jdata
    data = _check_values(op, "voxel_data", voxel_data, grid.total_voxels, "one a voxel", grid, p)
    dtype = torch.float32 if data.dtype in _LOW_PRECISION else data.dtype
    rows, weights, grads = _stencil(grid, points, p, bezier, dtype)
    flat = data.reshape(data.shape[0], math.prod(data.shape[1:])).to(dtype)
    values = flat.new_zeros(p.shape[0], flat.shape[1])
    gradient = flat.new_zeros(p.shape[0], flat.shape[1], 3) if with_grad else None
    for k in range(rows.shape[1]):
        near = _gather(flat, rows, k)
        values = values + weights[:, k, None] * near
        if with_grad:
            gradient = gradient + near[:, :, None] * grads[:, k, None, :]
    shape = (p.shape[0], *data.shape[1:])
    values = points.jagged_like(values.to(data.dtype).reshape(shape))
    if not with_grad:
        return values
    return values, points.jagged_like(gradient.to(data.dtype).reshape(*shape, 3))


def sample_trilinear_with_grad(grid, points: JaggedTensor, voxel_data):
    """Trilinear interpolation of the voxels' features at points, with the gradient of the
    interpolated field with respect to the world position.

    Args:
        grid: The GridBatch.
        points: World points, a JaggedTensor with one [N_b, 3] tensor a grid (float32 or
            float64, finite).
        voxel_data: The voxels' features, [total_voxels, *C] (a tensor or a JaggedTensor) of
            the points' dtype (or float16 / bfloat16: computed in float32).

    Returns:
        (values, gradients), jagged like points: values [N, *C] (as sample_trilinear's),
        gradients [N, *C, 3] (fVDB's layout: d value / d x, d y, d z last). The gradient is
        that of the cell between the 8 voxel centres around the point, the cell whose lower
        corner is floor(u) (on a cell face, the one above it, as fVDB's). Both are
        differentiable in voxel_data and in points.
    """
    return _sample("GridBatch.sample_trilinear_with_grad", grid, points, voxel_data, False, True)


def sample_bezier(grid, points: JaggedTensor, voxel_data) -> JaggedTensor:
    """Quadratic B-spline ("Bezier", fVDB's name) interpolation of the voxels' features at
    points, over the 3x3x3 voxels around each point's nearest voxel, with fVDB's weights (the
    module's docstring has them; they add up to 8).

    Args:
        grid: The GridBatch.
        points: World points, a JaggedTensor with one [N_b, 3] tensor a grid (float32 or
            float64, finite).
        voxel_data: The voxels' features, [total_voxels, *C] (a tensor or a JaggedTensor) of
            the points' dtype (or float16 / bfloat16: computed in float32).

    Returns:
        [N, *C] jagged like points. Differentiable in voxel_data and in points (the weights are
        continuously differentiable in the points).
    """
    return _sample("GridBatch.sample_bezier", grid, points, voxel_data, True, False)


def sample_bezier_with_grad(grid, points: JaggedTensor, voxel_data):
    """sample_bezier with the gradient of the interpolated field with respect to the world
    position.

    Args:
        grid: The GridBatch.
        points: World points, a JaggedTensor with one [N_b, 3] tensor a grid (float32 or
            float64, finite).
        voxel_data: The voxels' features, [total_voxels, *C] (a tensor or a JaggedTensor) of
            the points' dtype (or float16 / bfloat16: computed in float32).

    Returns:
        (values, gradients), jagged like points: values [N, *C], gradients [N, *C, 3] (fVDB's
        layout). Both differentiable in voxel_data and in points.
    """
    return _sample("GridBatch.sample_bezier_with_grad", grid, points, voxel_data, True, True)


def splat_bezier(grid, points: JaggedTensor, points_data) -> JaggedTensor:
    """Point values spread over the 3x3x3 voxels around each point with sample_bezier's
    weights, summed into the voxels: the adjoint of sample_bezier (for features f and values v,
    <splat_bezier(points, v), f> = <v, sample_bezier(points, f)>). Inactive voxels get nothing.

    Args:
        grid: The GridBatch.
        points: World points, a JaggedTensor with one [N_b, 3] tensor a grid (float32 or
            float64, finite).
        points_data: The values, [N, *C] (a tensor or a JaggedTensor jagged like points), of
            the points' dtype (or float16 / bfloat16: summed in float32).

    Returns:
        [total_voxels, *C], a JaggedTensor jagged as the grid's voxels. Differentiable in
        points_data and in points.
    """
    op = "GridBatch.splat_bezier"
    p = check_vectors(op, "points", grid, points).jdata
    values = _check_values(op, "points_data", points_data, p.shape[0], "one a point", grid, p)
    dtype = torch.float32 if values.dtype in _LOW_PRECISION else values.dtype
    rows, weights, _ = _stencil(grid, points, p, True, dtype)
    flat = values.reshape(values.shape[0], math.prod(values.shape[1:])).to(dtype)
    out = flat.new_zeros(grid.total_voxels, flat.shape[1])
    if grid.total_voxels:
        for k in range(rows.shape[1]):
            r = rows[:, k]
            # Inactive voxels add an exact zero to row 0 (no mask read back to the host).
            part = torch.where((r >= 0)[:, None], weights[:, k, None] * flat, 0)
            out.index_add_(0, r.clamp(min=0), part)
    out = out.to(values.dtype).reshape(grid.total_voxels, *values.shape[1:])
    return JaggedTensor._from_trusted(out, grid.voxel_offsets)
