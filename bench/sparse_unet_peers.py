"""tg.nn.SparseUNet's architecture in spconv 2.x and TorchSparse 2.1, for bench_sparse_conv.py's
U-Net rows: the same layers, channels and levels, with a tilegrid net's weights copied in, so the
three libraries compute the same function on the same voxels (the bench checks the outputs) and
their times compare like for like.

    peer = spconv_unet(spconv, net)            # spconv = spconv.pytorch, net a tg.nn.SparseUNet
    coords, shape, batch = voxels(grid, net.levels)
    out = peer(spconv_input(spconv, features, coords, shape, batch))

Tap orders. tilegrid (include/tilegrid/grid/convolution.h, src/grid/conv/conv_taps.h): weight
[C_out, C_in, a, b, c] is the tap (a, b, c) over the voxel axes (i, j, k), which the peers get as
(x, y, z). Output o reads input o + (a, b, c) - 1 in a 3x3x3 convolution and o * 2 + (a, b, c) in
a kernel-2 stride-2 one (the 2x2x2 block whose parent is o); the transposed convolution sends
input i to output i * 2 + (a, b, c) through the same tap.
- spconv 2.x: weight [C_out, kx, ky, kz, C_in], cross-correlation as torch.nn.Conv3d's (output o
  reads input o * stride - pad + t), so every kind takes our weight permuted (0, 2, 3, 4, 1); the
  3x3x3 case is what bench_sparse_conv.py's per-layer check confirms. SparseInverseConv3d runs
  the pairs of the SparseConv3d of its indice_key backwards with the same tap index: coarse c
  feeds fine c * 2 + t, as ours.
- TorchSparse 2.1: kernel [taps, C_in, C_out], its tap index set by the kernel volume's parity
  (nn/utils/kernel.py and the hashmap kernels in backend/): odd (3x3x3): x fastest, index
  z * 9 + y * 3 + x for offset (x, y, z) - 1. Even (2x2x2): z fastest, index x * 4 + y * 2 + z;
  its default map builder (build_kernel_map_downsample_hashmap) finds input o * 2 + 1 - d
  through its stage-1 tap d and stores it as tap 7 - d, i.e. input o * 2 + t under
  t = x * 4 + y * 2 + z: our order. transposed=True runs the down convolution's map transposed
  (convert_transposed_out_in_map keeps the tap index), so the up convolution converts the same.
"""

from __future__ import annotations

import torch
from torch import nn

import tilegrid as tg


# ---------------------------------------------------------------------------------------------
# The two libraries' sparse tensors, seen alike: spconv's SparseConvTensor (features, indices)
# and TorchSparse's SparseTensor (feats, coords), both with rows (batch, x, y, z).


def features(t) -> torch.Tensor:
    return t.features if hasattr(t, "replace_feature") else t.feats


def coordinates(t) -> torch.Tensor:
    return t.indices if hasattr(t, "replace_feature") else t.coords


def with_features(t, f: torch.Tensor):
    """t's voxels (and maps) with features f."""
    if hasattr(t, "replace_feature"):  # spconv
        return t.replace_feature(f)
    # TorchSparse, as its fapply: the caches are shared, so maps built later are seen by all.
    out = type(t)(coords=t.coords, feats=f, stride=t.stride, spatial_range=t.spatial_range)
    out._caches = t._caches
    return out


# ---------------------------------------------------------------------------------------------
# The network: tg.nn.SparseUNet's module tree (same names, so weights copy by name) over a
# peer's convolutions. conv(cin, cout, kind, level) makes one: kind "subm" (3x3x3 on level's
# voxels), "down" (kernel 2 stride 2, level -> level + 1) or "up" (its transpose, back onto
# level's voxels). Norms, activations and the concatenation run on the feature rows, as
# tilegrid's do (and TorchSparse's BatchNorm, ReLU and cat: torch's ops on the feats).


class _ConvNormReLU(nn.Module):
    def __init__(self, conv: nn.Module, channels: int):
        super().__init__()
        self.conv, self.norm = conv, nn.BatchNorm1d(channels)

    def forward(self, x):
        y = self.conv(x)
        return with_features(y, torch.relu(self.norm(features(y))))


class _ResidualBlock(nn.Module):
    def __init__(self, conv, channels: int, level: int):
        super().__init__()
        self.conv1, self.norm1 = conv(channels, channels, "subm", level), nn.BatchNorm1d(channels)
        self.conv2, self.norm2 = conv(channels, channels, "subm", level), nn.BatchNorm1d(channels)

    def forward(self, x):
        # Each step wraps the latest convolution's output, not x: spconv's indice_dict is copied
        # per convolution, so a map built by conv1 is only in conv1's output.
        y = self.conv1(x)
        y = self.conv2(with_features(y, torch.relu(self.norm1(features(y)))))
        return with_features(y, torch.relu(self.norm2(features(y)) + features(x)))


class PeerUNet(nn.Module):
    def __init__(self, conv, in_channels: int, out_channels: int, channels, blocks_per_level: int):
        super().__init__()
        pairs = list(enumerate(zip(channels, channels[1:])))
        self.levels = len(channels)
        self.stem = _ConvNormReLU(conv(in_channels, channels[0], "subm", 0), channels[0])
        self.encoder = nn.ModuleList(
            nn.ModuleList(_ResidualBlock(conv, c, level) for _ in range(blocks_per_level))
            for level, c in enumerate(channels)
        )
        self.down = nn.ModuleList(_ConvNormReLU(conv(a, b, "down", i), b) for i, (a, b) in pairs)
        self.up = nn.ModuleList(_ConvNormReLU(conv(b, a, "up", i), a) for i, (a, b) in pairs)
        self.merge = nn.ModuleList(
            _ConvNormReLU(conv(2 * c, c, "subm", level), c) for level, c in enumerate(channels[:-1])
        )
        self.decoder = nn.ModuleList(
            nn.ModuleList(_ResidualBlock(conv, c, level) for _ in range(blocks_per_level))
            for level, c in enumerate(channels[:-1])
        )
        self.head = nn.Linear(channels[0], out_channels)

    def forward(self, x):
        x = self.stem(x)
        skips = []
        for level in range(self.levels):
            for block in self.encoder[level]:
                x = block(x)
            if level + 1 < self.levels:
                skips.append(x)
                x = self.down[level](x)
        for level in reversed(range(self.levels - 1)):
            # The up convolution's output has the skip's voxels in the skip's row order (both
            # peers return to the finer tensor's own indices), and carries every map built so far.
            x = self.up[level](x)
            x = with_features(x, torch.cat([features(x), features(skips[level])], 1))
            x = self.merge[level](x)
            for block in self.decoder[level]:
                x = block(x)
        return with_features(x, self.head(features(x)))


def _copy_weights(peer: PeerUNet, net, conv_weight) -> None:
    """net's parameters and norm statistics into peer's modules of the same names; conv_weight(w)
    is a tilegrid convolution weight [C_out, C_in, kx, ky, kz] in the peer's layout."""
    targets = dict(peer.named_modules())
    copied = set()
    with torch.no_grad():
        for name, m in net.named_modules():
            if isinstance(m, (tg.nn.SparseConv3d, tg.nn.SparseConvTranspose3d)):
                param = getattr(targets[name], "kernel", None)  # TorchSparse's name
                param = param if isinstance(param, nn.Parameter) else targets[name].weight
                w = conv_weight(m.weight)
                if w.shape != param.shape:
                    raise ValueError(
                        f"{name}: weight {list(w.shape)} for the peer's {list(param.shape)}")
                param.copy_(w)
            elif isinstance(m, (nn.BatchNorm1d, nn.Linear)):
                targets[name].load_state_dict(m.state_dict())
            else:
                continue
            copied.add(name)
    owners = {n for n, m in peer.named_modules() if any(True for _ in m.parameters(recurse=False))}
    missed = owners - copied
    if missed:
        raise ValueError(f"no tilegrid weights for the peer's {sorted(missed)}")


def _peer_of(net, conv, conv_weight) -> PeerUNet:
    """A PeerUNet of net's shape on net's device and dtype, net's weights copied in."""
    channels = [blocks[0].conv1.in_channels for blocks in net.encoder]
    peer = PeerUNet(conv, net.stem.conv.in_channels, net.head.out_features, channels,
                    len(net.encoder[0]))
    peer = peer.to(net.head.weight.device, net.head.weight.dtype)
    _copy_weights(peer, net, conv_weight)
    return peer.train(net.training)


# ---------------------------------------------------------------------------------------------
# spconv 2.x


def spconv_weight(w: torch.Tensor) -> torch.Tensor:
    """[C_out, C_in, kx, ky, kz] -> spconv's [C_out, kx, ky, kz, C_in] (module docstring)."""
    return w.permute(0, 2, 3, 4, 1)


def spconv_unet(spconv, net) -> PeerUNet:
    """net (a tg.nn.SparseUNet) in spconv (the spconv.pytorch module). The convolutions of a
    level share its maps through indice_key "subm{level}"; an up convolution inverts the down
    convolution of its level through "down{level}"."""
    def conv(cin, cout, kind, level):
        if kind == "subm":
            return spconv.SubMConv3d(cin, cout, 3, bias=False, indice_key=f"subm{level}")
        if kind == "down":
            return spconv.SparseConv3d(cin, cout, 2, stride=2, bias=False,
                                       indice_key=f"down{level}")
        return spconv.SparseInverseConv3d(cin, cout, 2, indice_key=f"down{level}", bias=False)

    return _peer_of(net, conv, spconv_weight)


def spconv_input(spconv, feats, coords, shape, batch_size, maps=None):
    """The U-Net's input; maps (spconv_maps of an earlier output) are reused, else all are built."""
    t = spconv.SparseConvTensor(feats, coords, shape, batch_size)
    if maps is not None:
        t.indice_dict = maps  # each convolution adds to a copy of the dict: maps stays as it is
    return t


def spconv_maps(out) -> dict:
    """The submanifold maps of a U-Net output, for spconv_input. Only those: spconv reuses a
    strided convolution's indice_key within one forward (for its inverse) but not across calls
    (SparseConv3d asserts "only support reuse subm indices" when its key is already present), so
    the stride-2 maps are built in every call."""
    return {key: data for key, data in out.indice_dict.items() if data.is_subm}


# ---------------------------------------------------------------------------------------------
# TorchSparse 2.1


def torchsparse_weight(w: torch.Tensor) -> torch.Tensor:
    """[C_out, C_in, kx, ky, kz] -> [taps, C_in, C_out] in TorchSparse's tap order (module
    docstring): x fastest for an odd kernel volume, z fastest (our order) for an even one."""
    taps = w[0, 0].numel()
    order = (4, 3, 2, 1, 0) if taps % 2 else (2, 3, 4, 1, 0)
    return w.permute(*order).reshape(taps, w.shape[1], w.shape[0])


def torchsparse_unet(ts, net) -> PeerUNet:
    """net (a tg.nn.SparseUNet) in TorchSparse (the torchsparse module, with torchsparse.nn
    imported). Its maps are cached per tensor stride in the caches every tensor of a forward
    shares; the transposed convolution reuses the down convolution's map."""
    def conv(cin, cout, kind, level):
        if kind == "subm":
            return ts.nn.Conv3d(cin, cout, 3, bias=False)
        return ts.nn.Conv3d(cin, cout, 2, stride=2, bias=False, transposed=kind == "up")

    return _peer_of(net, conv, torchsparse_weight)


def torchsparse_input(ts, feats, coords, shape, batch_size, caches=None):
    """The U-Net's input; caches (an earlier output's _caches) reuse that call's maps, else all
    are built. The spatial range matters: without one, TorchSparse bounds a stride-2 output by
    the largest input coordinate, (max - 1) // 2, and drops the voxels at an even largest one."""
    t = ts.SparseTensor(feats, coords, spatial_range=(batch_size, *shape))
    if caches is not None:
        t._caches = caches
    return t


def torchsparse_maps(out):
    return out._caches


# ---------------------------------------------------------------------------------------------


def voxels(grid, levels: int):
    """A grid batch's voxels for the peers: (int32 [N, 4] rows (batch, i, j, k) in the grid's row
    order, spatial shape [3], batch size). The coordinates move to non-negative ones by a
    multiple of 2 ** (levels - 1) per axis, which keeps every level's 2x2x2 blocks those of
    tilegrid's grids; the shape is rounded up to that multiple, since both peers size a
    stride-2 output as floor((S - 2) / 2) + 1 and would drop the last voxels of an odd S."""
    ijk = grid.ijk
    step = 2 ** (levels - 1)
    xyz = ijk.jdata.long()
    xyz = xyz - torch.div(xyz.min(0).values, step, rounding_mode="floor") * step
    shape = ((xyz.max(0).values + step) // step * step).tolist()
    coords = torch.cat([ijk.jidx.long()[:, None], xyz], 1).int().contiguous()
    return coords, shape, ijk.num_tensors
