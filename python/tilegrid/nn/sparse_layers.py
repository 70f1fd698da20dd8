"""Pooling, normalisation and activations over a grid's features (JaggedTensors), with
fVDB's module names and call forms."""

from __future__ import annotations

import torch
from torch import nn

from ..jagged_tensor import JaggedTensor
from ..sparse_conv import vec3


class _OnFeatureRows:
    """Mixin for a torch.nn module that acts on [N, C] rows: forward(data, grid=None) runs the
    torch module on data's rows (a JaggedTensor's jdata, or a tensor) and keeps data's layout."""

    def forward(self, data, grid=None):
        rows = data.jdata if isinstance(data, JaggedTensor) else data
        out = super().forward(rows)
        return data.jagged_like(out) if isinstance(data, JaggedTensor) else out


class MaxPool(nn.Module):
    """forward(fine_data, fine_grid, coarse_grid=None) -> (coarse_data, coarse_grid): the max
    over each window of kernel_size voxels every stride (default kernel_size) voxels."""

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = vec3("MaxPool: kernel_size", kernel_size)
        self.stride = self.kernel_size if stride is None else vec3("MaxPool: stride", stride)

    def forward(self, fine_data, fine_grid, coarse_grid=None):
        return fine_grid.max_pool(self.kernel_size, fine_data, self.stride, coarse_grid)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class AvgPool(MaxPool):
    """As MaxPool, with the mean over each window's active voxels."""

    def forward(self, fine_data, fine_grid, coarse_grid=None):
        return fine_grid.avg_pool(self.kernel_size, fine_data, self.stride, coarse_grid)


MaxPool3d, AvgPool3d = MaxPool, AvgPool


class BatchNorm(_OnFeatureRows, nn.BatchNorm1d):
    """torch.nn.BatchNorm1d over every voxel of every grid of the batch (features [N, C])."""


class GroupNorm(nn.GroupNorm):
    """GroupNorm of a batch of grids, as fVDB's: the statistics of each group of channels over
    all voxels of one grid (data must be a JaggedTensor, one tensor a grid)."""

    def forward(self, data: JaggedTensor, grid=None) -> JaggedTensor:
        if not isinstance(data, JaggedTensor):
            raise TypeError(f"GroupNorm: data must be a JaggedTensor, got {type(data).__name__}")
        x = data.jdata
        if x.dim() != 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: data must be [N, {self.num_channels}], got {list(x.shape)}")
        n, g = x.shape[0], self.num_groups
        b = data.jidx.long()
        xg = x.float().view(n, g, -1)
        count = (torch.bincount(b, minlength=data.num_tensors).clamp(min=1) * xg.shape[2]).to(xg)
        mean = xg.new_zeros(data.num_tensors, g).index_add_(0, b, xg.sum(-1)) / count[:, None]
        centred = xg - mean[b, :, None]
        var = xg.new_zeros(data.num_tensors, g).index_add_(0, b, centred.square().sum(-1)) / count[:, None]
        y = (centred * torch.rsqrt(var[b, :, None] + self.eps)).view(n, -1)
        if self.affine:
            y = y * self.weight + self.bias
        return data.jagged_like(y.to(x.dtype))


class LayerNorm(_OnFeatureRows, nn.LayerNorm):
    """torch.nn.LayerNorm over each voxel's channels."""


class ReLU(_OnFeatureRows, nn.ReLU):
    pass


class LeakyReLU(_OnFeatureRows, nn.LeakyReLU):
    pass


class SiLU(_OnFeatureRows, nn.SiLU):
    pass
