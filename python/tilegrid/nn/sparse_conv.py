"""Sparse convolution modules with fVDB's interface: weights as torch.nn.Conv3d's,
forward(data, plan) with a ConvolutionPlan naming the input and output grids."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..grid.jagged_tensor import JaggedTensor
from ..grid.sparse_conv import ConvolutionPlan, vec3


class _SparseConvBase(nn.Module):
    transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size=3, stride=1, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ValueError(
                f"{type(self).__name__}: channels must be >= 1, got in_channels={in_channels}, "
                f"out_channels={out_channels}"
            )
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = vec3(f"{type(self).__name__}: kernel_size", kernel_size)
        self.stride = vec3(f"{type(self).__name__}: stride", stride)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size, **factory))
        self.bias = nn.Parameter(torch.empty(out_channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch.nn.Conv3d's default initialisation (kaiming-uniform with a = sqrt(5)).
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_channels * math.prod(self.kernel_size))
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, data: JaggedTensor, plan: ConvolutionPlan, *, scale=None, shift=None,
                residual=None, relu: bool = False) -> JaggedTensor:
        """The convolution (+ bias); scale, shift, residual, relu: ConvolutionPlan.execute's
        epilogue, applied after the bias (which is folded into it)."""
        if not isinstance(plan, ConvolutionPlan):
            raise TypeError(f"{type(self).__name__}: plan must be a ConvolutionPlan, got {type(plan).__name__}")
        if not plan.valid_usage(self.in_channels, self.out_channels, self.kernel_size, self.stride,
                                self.transposed):
            raise ValueError(
                f"{type(self).__name__}(kernel_size={self.kernel_size}, stride={self.stride}) run on "
                f"{plan!r}: kernel size, stride or transposition differ"
            )
        if scale is not None or shift is not None or residual is not None or relu:
            if self.bias is not None:  # (conv + b) * scale + shift = conv * scale + (b * scale + shift)
                b = self.bias if scale is None else self.bias * scale
                shift = b if shift is None else b + shift
            return plan.execute(data, self.weight, scale=scale, shift=shift, residual=residual,
                                relu=relu)
        out = plan.execute(data, self.weight)
        if self.bias is not None:
            bias = self.bias.to(out.dtype)
            out = out + bias if not isinstance(out, JaggedTensor) else out.jagged_like(out.jdata + bias)
        return out

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, bias={self.bias is not None}")


class SparseConv3d(_SparseConvBase):
    """out[o] = sum over taps t of W[:, :, t] . data[o * stride + t - pad] (+ bias), pad =
    (kernel_size - 1) // 2 as fVDB 0.6's (sparse_conv.py), over the plan's grids
    (ConvolutionPlan.from_grid_batch; target = source for a submanifold convolution). weight
    [out_channels, in_channels, kx, ky, kz], as torch.nn.Conv3d, and initialised as its.

    Args:
        in_channels: The input features' width, >= 1.
        out_channels: The output features' width, >= 1.
        kernel_size: An int or three ints; default 3. Must match the plan's.
        stride: An int or three ints; default 1. Must match the plan's.
        bias: Whether there is a learnable bias [out_channels]; default True.
        device: The parameters' device.
        dtype: The parameters' dtype.
    """


class SparseConvTranspose3d(_SparseConvBase):
    """The transposed convolution: data[i] feeds out[i * stride + t - pad] through tap t
    (ConvolutionPlan.from_grid_batch_transposed). Weight layout as SparseConv3d's (fVDB's
    convention: [out_channels, in_channels, ...], not torch.nn.ConvTranspose3d's).

    Args:
        in_channels: The input features' width, >= 1.
        out_channels: The output features' width, >= 1.
        kernel_size: An int or three ints; default 3. Must match the plan's.
        stride: An int or three ints; default 1. Must match the plan's.
        bias: Whether there is a learnable bias [out_channels]; default True.
        device: The parameters' device.
        dtype: The parameters' dtype.
    """

    transposed = True
