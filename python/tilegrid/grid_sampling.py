"""Differentiable trilinear sampling and splatting between points and a GridBatch's voxels.

sample: features at points (gradients to the features and to the points); splat: point
values into voxels (gradients to the values). Each is the other's adjoint in the features.
"""

from __future__ import annotations

import torch

from . import _C
from ._torch import current_stream
from ._torch import dlpack_pair as _capsules


class SampleTrilinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grid, points, joffsets, features):
        out = features.new_empty(points.shape[0], features.shape[1])
        _C.grid_sample_trilinear(
            grid, *_capsules(points, joffsets), features.contiguous(), out, current_stream(out)
        )
        ctx.grid = grid
        ctx.save_for_backward(points, joffsets, features)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        points, joffsets, features = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_points = grad_features = None
        if ctx.needs_input_grad[1]:
            grad_points = torch.empty_like(points)
            _C.grid_sample_trilinear_backward_points(
                ctx.grid, *_capsules(points, joffsets), features.contiguous(), grad_out, grad_points,
                current_stream(grad_points),
            )
        if ctx.needs_input_grad[3]:
            grad_features = torch.empty_like(features)
            _C.grid_splat_trilinear(
                ctx.grid, *_capsules(points, joffsets), grad_out, grad_features,
                current_stream(grad_features),
            )
        return None, grad_points, None, grad_features


class SplatTrilinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grid, total_voxels, points, joffsets, values):
        out = values.new_empty(total_voxels, values.shape[1])
        _C.grid_splat_trilinear(
            grid, *_capsules(points, joffsets), values.contiguous(), out, current_stream(out)
        )
        ctx.grid = grid
        ctx.save_for_backward(points, joffsets)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        points, joffsets = ctx.saved_tensors
        grad_values = None
        if ctx.needs_input_grad[4]:
            grad_values = grad_out.new_empty(points.shape[0], grad_out.shape[1])
            _C.grid_sample_trilinear(
                ctx.grid, *_capsules(points, joffsets), grad_out.contiguous(), grad_values,
                current_stream(grad_values),
            )
        return None, None, None, None, grad_values
