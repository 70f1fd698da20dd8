"""tg.nn.SerializedAttention: multi-head self-attention over a grid's voxels in patches of
`patch_size` voxels that are neighbours along a space-filling curve (Morton or Hilbert order
of their ijk, per grid), the serialized attention of Point Transformer V3. Each patch is one
variable-length sequence of tg.flash_attn_varlen_func (forward and backward kernels); a
grid's last patch holds what is left. fVDB's own attention over voxels is torch SDPA over
nested views.

    attn = tg.nn.SerializedAttention(channels=64, num_heads=4, patch_size=256, order="hilbert")
    out = attn(features, grid)        # features: JaggedTensor or [total_voxels, C] tensor
"""

from __future__ import annotations

import torch

from ..flash_attn import flash_attn_varlen_func
from ..grid import serialize
from ..grid.jagged_tensor import JaggedTensor


def serialized_patches(grid, order: str, patch_size: int):
    """(perm, cu_seqlens, max_len): rows of the batch sorted grid by grid along the curve, and
    the int32 offsets of the patches of patch_size rows (each within one grid) in that order."""
    codes = {"morton": serialize.morton, "hilbert": serialize.hilbert}[order](grid)
    key = codes.jdata
    perm = torch.argsort(key, stable=True)
    perm = perm[torch.argsort(codes.jidx.long()[perm], stable=True)]  # grid-major, curve-minor
    counts = grid.voxel_offsets.diff().to(key.device)
    lengths = []
    for n in counts.tolist():
        lengths += [patch_size] * (n // patch_size) + ([n % patch_size] if n % patch_size else [])
    cu = torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0).to(torch.int32).to(key.device)
    return perm, cu, (max(lengths) if lengths else 0)


class SerializedAttention(torch.nn.Module):
    """qkv projection, attention within each patch, output projection; [N, C] -> [N, C].

    forward(features, grid): features are the grid's, a JaggedTensor or a
    [total_voxels, channels] tensor; the output has their layout.

    Args:
        channels: C, the features' width; a multiple of num_heads.
        num_heads: The number of attention heads (each of channels / num_heads dims).
        patch_size: Voxels a patch (a grid's last patch holds what is left); default 1024.
        order: The space-filling curve that orders the voxels, "hilbert" (default) or
            "morton".
        bias: Whether the qkv and output projections have a bias; default True.
        device: The parameters' device.
        dtype: The parameters' dtype.
    """

    def __init__(self, channels: int, num_heads: int, patch_size: int = 1024, order: str = "hilbert",
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        if channels % num_heads:
            raise ValueError(f"SerializedAttention: channels ({channels}) must be a multiple of num_heads ({num_heads})")
        if order not in ("morton", "hilbert"):
            raise ValueError(f"SerializedAttention: order must be 'morton' or 'hilbert', got {order!r}")
        if patch_size < 1:
            raise ValueError(f"SerializedAttention: patch_size must be >= 1, got {patch_size}")
        self.channels, self.num_heads, self.patch_size, self.order = channels, num_heads, patch_size, order
        kw = dict(device=device, dtype=dtype)
        self.qkv = torch.nn.Linear(channels, 3 * channels, bias=bias, **kw)
        self.proj = torch.nn.Linear(channels, channels, bias=bias, **kw)
        self._cached = None  # (grid, (perm, inverse, cu, max_len)) of the last call

    def patches(self, grid):
        """(perm, inverse, cu_seqlens, max_len) of `grid`'s patches, kept for the next call on
        the same grid (the codes, the sort and the offsets cost more than the attention on small
        grids, and a network calls every layer on the same grid)."""
        if self._cached is None or self._cached[0] is not grid:
            perm, cu, max_len = serialized_patches(grid, self.order, self.patch_size)
            inverse = torch.empty_like(perm)
            inverse[perm] = torch.arange(perm.shape[0], device=perm.device)
            self._cached = (grid, (perm, inverse, cu, max_len))
        return self._cached[1]

    def forward(self, features, grid):
        x = features.jdata if isinstance(features, JaggedTensor) else features
        if x.shape != (grid.total_voxels, self.channels):
            raise ValueError(f"SerializedAttention: features must be [{grid.total_voxels}, {self.channels}], "
                             f"got {list(x.shape)}")
        perm, inverse, cu, max_len = self.patches(grid)
        h, d = self.num_heads, self.channels // self.num_heads
        qkv = self.qkv(x[perm]).view(-1, 3, h, d)
        q, k, v = (qkv[:, i].contiguous() for i in range(3))
        out = flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len)
        y = self.proj(out.reshape(-1, self.channels)[inverse])
        return features.jagged_like(y) if isinstance(features, JaggedTensor) else y
