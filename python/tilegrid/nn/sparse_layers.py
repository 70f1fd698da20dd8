"""Pooling, normalisation and activations over a grid's features (JaggedTensors), with
fVDB's module names and call forms."""

from __future__ import annotations

import torch
from torch import nn

from ..grid.jagged_tensor import JaggedTensor
from ..grid.sparse_conv import vec3


class _OnFeatureRows:
    """Mixin for a torch.nn module that acts on [N, C] rows: forward(data, grid=None) runs the
    torch module on data's rows (a JaggedTensor's jdata, or a tensor) and keeps data's layout."""

    def forward(self, data, grid=None):
        rows = data.jdata if isinstance(data, JaggedTensor) else data
        out = super().forward(rows)
        return data.jagged_like(out) if isinstance(data, JaggedTensor) else out


class MaxPool(nn.Module):
    """forward(fine_data, fine_grid, coarse_grid=None) -> (coarse_data, coarse_grid): the max
    over each window of kernel_size voxels every stride voxels, over its active voxels
    (GridBatch.max_pool, which says where a window starts). coarse_grid defaults to the
    windows' coarse grid.

    Args:
        kernel_size: The window, an int or three ints.
        stride: The step between windows, an int or three ints; None (default): kernel_size.
    """

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = vec3("MaxPool: kernel_size", kernel_size)
        self.stride = self.kernel_size if stride is None else vec3("MaxPool: stride", stride)

    def forward(self, fine_data, fine_grid, coarse_grid=None):
        return fine_grid.max_pool(self.kernel_size, fine_data, self.stride, coarse_grid)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class AvgPool(MaxPool):
    """As MaxPool, with the mean over each window's active voxels (GridBatch.avg_pool).

    Args:
        kernel_size: The window, an int or three ints.
        stride: The step between windows, an int or three ints; None (default): kernel_size.
    """

    def forward(self, fine_data, fine_grid, coarse_grid=None):
        return fine_grid.avg_pool(self.kernel_size, fine_data, self.stride, coarse_grid)


MaxPool3d, AvgPool3d = MaxPool, AvgPool


class UpsamplingNearest(nn.Module):
    """forward(coarse_data, coarse_grid, mask=None, fine_grid=None) -> (fine_data, fine_grid):
    nearest-neighbour upsampling (fVDB's fvdb.nn.UpsamplingNearest, GridBatch.refine): each
    coarse voxel splits into scale_factor^3 fine voxels that take its features. fine_grid
    defaults to coarse_grid.refined_grid(scale_factor, mask), mask (bool, a value a coarse
    voxel) choosing the voxels that split; a given fine_grid's voxels without a coarse parent
    get zeros. Differentiable in coarse_data.

    Args:
        scale_factor: The upsampling factor, an int or three ints (each >= 1).
    """

    def __init__(self, scale_factor):
        super().__init__()
        self.scale_factor = vec3("UpsamplingNearest: scale_factor", scale_factor)

    def forward(self, coarse_data, coarse_grid, mask=None, fine_grid=None):
        return coarse_grid.refine(self.scale_factor, coarse_data, mask, fine_grid=fine_grid)

    def extra_repr(self) -> str:
        return f"scale_factor={self.scale_factor}"


class BatchNorm(_OnFeatureRows, nn.BatchNorm1d):
    """torch.nn.BatchNorm1d over every voxel of every grid of the batch (features [N, C]).

    In eval mode a SparseUNet folds it into the preceding convolution's epilogue (a per-channel
    scale and shift) and keeps the folded values until the statistics or affine parameters
    change: by an in-place op (their version counters), by load_state_dict, or by training
    (train() drops them; torch's training-mode update of the running statistics does not always
    advance their version counters). A change made through .data in eval mode is not seen:
    call train(False) again after one.

    forward(data, grid=None) normalises data's rows (a JaggedTensor's jdata, or an [N, C]
    tensor) and keeps data's layout; grid is not read.

    Args:
        num_features: C, the number of channels.
        eps: Added to the variance for stability; default 1e-5.
        momentum: The running statistics' update factor; None: a cumulative average.
            Default 0.1.
        affine: Whether there are learnable per-channel weight and bias; default True.
        track_running_stats: Whether running statistics are kept (and used in eval mode);
            default True.
        device: The parameters' and buffers' device.
        dtype: The parameters' and buffers' dtype.

    All as torch.nn.BatchNorm1d's.
    """

    def train(self, mode: bool = True):
        self.__dict__.pop("_tilegrid_folded", None)
        return super().train(mode)


class SyncBatchNorm(BatchNorm):
    """BatchNorm whose training statistics are those of every voxel on every rank of a
    torch.distributed process group (torch.nn.SyncBatchNorm's role for sparse features, on any
    device and backend: the per-channel sums, sums of squares and voxel counts are summed
    across the ranks, in float64, by torch.distributed.nn's differentiable all_reduce, so that
    the gradients flow through the shared statistics too). In eval mode, or without an
    initialized group of more than one rank, it is BatchNorm. convert_sync_batchnorm swaps
    a model's tg.nn.BatchNorm modules for it, as torch's does.

    Args:
        num_features: C, the number of channels.
        eps: Added to the variance for stability; default 1e-5.
        momentum: The running statistics' update factor; None: a cumulative average.
            Default 0.1.
        affine: Whether there are learnable per-channel weight and bias; default True.
        track_running_stats: Whether running statistics are kept; default True.
        process_group: The torch.distributed group whose ranks share the statistics; None:
            the default (world) group.
        device: The parameters' and buffers' device.
        dtype: The parameters' and buffers' dtype.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def forward(self, data, grid=None):
        import torch.distributed as dist
        from torch.distributed.nn.functional import all_reduce

        if not (self.training and dist.is_available() and dist.is_initialized()
                and dist.get_world_size(self.process_group) > 1):
            return super().forward(data, grid)
        rows = data.jdata if isinstance(data, JaggedTensor) else data
        if rows.dim() != 2 or rows.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: features must be [N, {self.num_features}], got {list(rows.shape)}")
        x = rows.double()
        local = torch.cat([x.sum(0), x.square().sum(0), x.new_full((1,), float(rows.shape[0]))])
        total = all_reduce(local, group=self.process_group or dist.group.WORLD)
        C = self.num_features
        count = total[2 * C].clamp_min(1)  # a tensor: nothing read back to the host
        mean = total[:C] / count
        var = (total[C:2 * C] / count - mean.square()).clamp_min(0)
        y = (x - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight.double() + self.bias.double()
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                self.running_mean.mul_(1 - factor).add_(factor * mean.to(self.running_mean.dtype))
                unbiased = var * count / (count - 1).clamp_min(1)
                self.running_var.mul_(1 - factor).add_(factor * unbiased.to(self.running_var.dtype))
        out = y.to(rows.dtype)
        return data.jagged_like(out) if isinstance(data, JaggedTensor) else out

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group=None) -> nn.Module:
        """module with every tg.nn.BatchNorm (not already synchronized) replaced by a
        SyncBatchNorm that holds the same parameter and buffer objects (as torch's does: an
        optimizer made before keeps working, dtype and device stay)."""
        if isinstance(module, BatchNorm) and not isinstance(module, SyncBatchNorm):
            sync = cls(module.num_features, module.eps, module.momentum, module.affine,
                       module.track_running_stats, process_group, device="meta")
            if module.affine:
                sync.weight, sync.bias = module.weight, module.bias
            sync.running_mean, sync.running_var = module.running_mean, module.running_var
            sync.num_batches_tracked = module.num_batches_tracked
            sync.train(module.training)
            return sync
        for name, child in module.named_children():
            module.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return module


class GroupNorm(nn.GroupNorm):
    """GroupNorm of a batch of grids, as fVDB's: the statistics of each group of channels over
    all voxels of one grid (data must be a JaggedTensor, one tensor a grid).
    forward(data, grid=None); grid is not read.

    Args:
        num_groups: The number of groups the channels are split into.
        num_channels: C, a multiple of num_groups.
        eps: Added to the variance for stability; default 1e-5.
        affine: Whether there are learnable per-channel weight and bias; default True.
        device: The parameters' device.
        dtype: The parameters' dtype.

    All as torch.nn.GroupNorm's.
    """

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
    """torch.nn.LayerNorm over each voxel's channels: forward(data, grid=None) normalises
    data's rows (a JaggedTensor's jdata, or an [N, C] tensor) and keeps its layout.

    Args:
        normalized_shape: The channels' shape, C or [C].
        eps: Added to the variance for stability; default 1e-5.
        elementwise_affine: Whether there is a learnable per-channel weight; default True.
        bias: Whether there is a learnable per-channel bias (with elementwise_affine);
            default True.
        device: The parameters' device.
        dtype: The parameters' dtype.

    All as torch.nn.LayerNorm's.
    """


class ReLU(_OnFeatureRows, nn.ReLU):
    """torch.nn.ReLU on a grid's features: forward(data, grid=None) applies it to data's rows
    (a JaggedTensor's jdata, or a tensor) and keeps its layout.

    Args:
        inplace: Overwrite the features, as torch.nn.ReLU's; default False.
    """


class LeakyReLU(_OnFeatureRows, nn.LeakyReLU):
    """torch.nn.LeakyReLU on a grid's features, as ReLU.

    Args:
        negative_slope: The slope for negative inputs; default 0.01.
        inplace: Overwrite the features, as torch.nn.LeakyReLU's; default False.
    """


class SiLU(_OnFeatureRows, nn.SiLU):
    """torch.nn.SiLU on a grid's features, as ReLU.

    Args:
        inplace: Overwrite the features, as torch.nn.SiLU's; default False.
    """
