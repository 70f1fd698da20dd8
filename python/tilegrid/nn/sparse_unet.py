"""A sparse residual U-Net (the MinkUNet / SparseResUNet family) for per-voxel prediction,
built from tilegrid's sparse modules.

    net = tg.nn.SparseUNet(in_channels=4, out_channels=3, channels=(32, 64, 128))
    logits = net(features, grid)          # JaggedTensor [grid.total_voxels, 3]

Level l runs submanifold 3x3x3 residual blocks on grid l; grid l + 1 = grid l .conv_grid(2, 2)
(each 2x2x2 block of voxels becomes one), reached by a stride-2 convolution and left by a
stride-2 transposed convolution back onto grid l, whose output is concatenated with level l's
encoder features (the skip connection). The plans of a grid's levels are built once per grid
and reused by every layer (plans(grid) builds them ahead of time).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..grid.jagged_tensor import JaggedTensor
from ..grid.sparse_conv import ConvolutionPlan
from .sparse_conv import SparseConv3d, SparseConvTranspose3d
from .sparse_layers import BatchNorm


def _folded(norm: BatchNorm):
    """An eval-mode BatchNorm as float32 (scale, shift): y = x * scale + shift. Kept on the
    module until its statistics or affine parameters change (see tg.nn.BatchNorm: version
    counters, train()), since the half-dozen small kernels that make them cost more host time
    a layer than the fused epilogue saves; differentiable in weight and bias when made with
    autograd on."""
    cache = not torch.compiler.is_compiling() and not torch.is_grad_enabled()
    if cache:  # (an autograd graph is not kept across calls; a traced one needs no cache)
        tensors = [norm.running_mean, norm.running_var] + ([norm.weight, norm.bias] if norm.affine else [])
        key = tuple((t._version, t.data_ptr()) for t in tensors)
        kept = getattr(norm, "_tilegrid_folded", None)
        if kept is not None and kept[0] == key:
            return kept[1]
    scale = torch.rsqrt(norm.running_var.float() + norm.eps)
    if norm.affine:
        scale = scale * norm.weight.float()
    shift = -norm.running_mean.float() * scale
    if norm.affine:
        shift = shift + norm.bias.float()
    if cache:
        norm._tilegrid_folded = (key, (scale, shift))
    return scale, shift


def _conv_norm_relu(conv, norm: BatchNorm, x: JaggedTensor, plan: ConvolutionPlan,
                    residual=None) -> JaggedTensor:
    """relu(norm(conv(x)) + residual). In eval mode the BatchNorm is its running statistics, a
    per-channel scale and shift, so the three run in the convolution's epilogue (inside the
    kernel when no gradient is wanted): one pass over the output instead of four."""
    if not norm.training and norm.track_running_stats and norm.running_var is not None:
        scale, shift = _folded(norm)
        return conv(x, plan, scale=scale, shift=shift, residual=residual, relu=True)
    norm.__dict__.pop("_tilegrid_folded", None)  # training updates the statistics
    out = conv(x, plan)  # on the plan's target grid
    y = norm(out.jdata)
    if residual is not None:
        y = y + residual.jdata
    return out.jagged_like(torch.relu(y))


class _ConvNormReLU(nn.Module):
    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int, transposed: bool = False):
        super().__init__()
        conv = SparseConvTranspose3d if transposed else SparseConv3d
        self.conv = conv(cin, cout, kernel_size, stride, bias=False)
        self.norm = BatchNorm(cout)

    def forward(self, x: JaggedTensor, plan: ConvolutionPlan) -> JaggedTensor:
        return _conv_norm_relu(self.conv, self.norm, x, plan)


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = SparseConv3d(channels, channels, 3, bias=False)
        self.norm1 = BatchNorm(channels)
        self.conv2 = SparseConv3d(channels, channels, 3, bias=False)
        self.norm2 = BatchNorm(channels)

    def forward(self, x: JaggedTensor, plan: ConvolutionPlan) -> JaggedTensor:
        y = _conv_norm_relu(self.conv1, self.norm1, x, plan)
        return _conv_norm_relu(self.conv2, self.norm2, y, plan, residual=x)


class SparseUNetPlans:
    """The grids of a SparseUNet's levels and the plans between them, for one input grid.

    Args:
        grid: The input GridBatch, level 0; level l + 1 is level l's conv_grid(2, 2).
        levels: The number of levels.
    """

    def __init__(self, grid, levels: int):
        self.grids = [grid]
        for _ in range(levels - 1):
            self.grids.append(self.grids[-1].conv_grid(2, 2))
        self.same = [ConvolutionPlan.from_grid_batch(3, 1, g, g) for g in self.grids]
        self.down = [ConvolutionPlan.from_grid_batch(2, 2, f, c) for f, c in zip(self.grids, self.grids[1:])]
        # The way back up is each down plan transposed: its maps, none built again.
        self.up = [down.transpose() for down in self.down]


class SparseUNet(nn.Module):
    """A sparse residual U-Net (the module's text): forward(data, grid) -> per-voxel outputs
    [grid.total_voxels, out_channels], a JaggedTensor jagged as data.

    A stem (3x3x3 convolution, BatchNorm, ReLU), then per level blocks_per_level residual
    blocks of two 3x3x3 convolutions; a stride-2 convolution down to the next level; on the
    way back up a stride-2 transposed convolution, concatenation with the level's encoder
    features, a 3x3x3 convolution and blocks_per_level residual blocks; a linear head.

    Args:
        in_channels: The input features' width.
        out_channels: The output's width (e.g. the number of classes).
        channels: The features' width at each level, finest first; its length is the number
            of levels. Default (32, 64, 128, 256).
        blocks_per_level: Residual blocks a level, in the encoder and in the decoder;
            default 1.
    """

    def __init__(self, in_channels: int, out_channels: int, channels: Sequence[int] = (32, 64, 128, 256),
                 blocks_per_level: int = 1):
        super().__init__()
        channels = [int(c) for c in channels]
        if not channels or min(channels) < 1 or blocks_per_level < 1:
            raise ValueError(
                f"SparseUNet: expected channels >= 1 for at least one level and blocks_per_level >= 1, "
                f"got channels={channels}, blocks_per_level={blocks_per_level}"
            )
        self.levels = len(channels)
        self.stem = _ConvNormReLU(in_channels, channels[0], 3, 1)
        self.encoder = nn.ModuleList(
            nn.ModuleList(_ResidualBlock(c) for _ in range(blocks_per_level)) for c in channels
        )
        self.down = nn.ModuleList(_ConvNormReLU(a, b, 2, 2) for a, b in zip(channels, channels[1:]))
        self.up = nn.ModuleList(_ConvNormReLU(b, a, 2, 2, transposed=True) for a, b in zip(channels, channels[1:]))
        self.merge = nn.ModuleList(_ConvNormReLU(2 * c, c, 3, 1) for c in channels[:-1])
        self.decoder = nn.ModuleList(
            nn.ModuleList(_ResidualBlock(c) for _ in range(blocks_per_level)) for c in channels[:-1]
        )
        self.head = nn.Linear(channels[0], out_channels)
        self._cached = None  # (grid, plans) of the last call

    def plans(self, grid) -> SparseUNetPlans:
        """The level grids and plans for `grid` (kept for the next call on the same grid)."""
        if self._cached is None or self._cached[0] is not grid:
            self._cached = (grid, SparseUNetPlans(grid, self.levels))
        return self._cached[1]

    def forward(self, data: JaggedTensor, grid) -> JaggedTensor:
        plans = self.plans(grid)
        x = self.stem(data, plans.same[0])
        skips = []
        for level in range(self.levels):
            for block in self.encoder[level]:
                x = block(x, plans.same[level])
            if level + 1 < self.levels:
                skips.append(x)
                x = self.down[level](x, plans.down[level])
        for level in reversed(range(self.levels - 1)):
            x = self.up[level](x, plans.up[level])
            x = skips[level].jagged_like(torch.cat([x.jdata, skips[level].jdata], dim=1))
            x = self.merge[level](x, plans.same[level])
            for block in self.decoder[level]:
                x = block(x, plans.same[level])
        return x.jagged_like(self.head(x.jdata))
