"""Differentiable volume rendering along rays, fVDB's `volume_render`:

    rgb, depth, opacity, weights, count = tg.volume_render(sigmas, rgbs, deltas, ts,
                                                           joffsets, transmittance_threshold)

Ray r owns samples joffsets[r] .. joffsets[r+1] (in order along it), each with a density
sigma, a length delta, a distance t and C features (any C). alpha = 1 - exp(-sigma delta),
transmittance T = prod(1 - alpha) before the sample, weight w = T alpha; rgb [R, C] = sum w c,
depth [R] = sum w t, opacity [R] = sum w, weights [S] = w, count [R] the samples marched
before T fell below transmittance_threshold (later samples weigh 0). Gradients flow to
sigmas, rgbs, deltas and ts from rgb, depth, opacity and weights. float32 or float64, sums in
float64 (C++ on the CPU, a ray a thread; on a GPU a ray a warp, in windows of 128 samples, the same
sums in another order: equal to the CPU's to rounding). On a GPU the call
checks joffsets with one kernel and reads back its verdict (it waits for the stream).
"""

from __future__ import annotations

import torch

from . import _C
from ._torch import current_stream
from .jagged_tensor import JaggedTensor


class _VolumeRender(torch.autograd.Function):
    @staticmethod
    def forward(ctx, sigmas, rgbs, deltas, ts, offsets, threshold):
        rays = offsets.shape[0] - 1
        rgb = rgbs.new_empty(rays, rgbs.shape[1])
        depth, opacity = sigmas.new_empty(rays), sigmas.new_empty(rays)
        weights = torch.empty_like(sigmas)
        count = torch.empty(rays, dtype=torch.int64, device=sigmas.device)
        _C.volume_render(sigmas, rgbs, deltas, ts, offsets, threshold, rgb, depth, opacity, weights,
                         count, current_stream(sigmas))
        ctx.save_for_backward(sigmas, rgbs, deltas, ts, offsets)
        ctx.threshold = threshold
        ctx.mark_non_differentiable(count)
        return rgb, depth, opacity, weights, count

    @staticmethod
    def backward(ctx, d_rgb, d_depth, d_opacity, d_weights, _):
        sigmas, rgbs, deltas, ts, offsets = ctx.saved_tensors
        rays = offsets.shape[0] - 1
        d_rgb = d_rgb.contiguous() if d_rgb is not None else rgbs.new_zeros(rays, rgbs.shape[1])
        d_depth = d_depth.contiguous() if d_depth is not None else sigmas.new_zeros(rays)
        d_opacity = d_opacity.contiguous() if d_opacity is not None else sigmas.new_zeros(rays)
        d_weights = d_weights.contiguous() if d_weights is not None else None
        grads = [torch.empty_like(t) for t in (sigmas, rgbs, deltas, ts)]
        _C.volume_render_backward(sigmas, rgbs, deltas, ts, offsets, ctx.threshold, d_rgb, d_depth,
                                  d_opacity, d_weights, *grads, current_stream(sigmas))
        return (*grads, None, None)


def volume_render(sigmas, rgbs, deltas, ts, joffsets, transmittance_threshold: float = 0.0):
    """Composites the samples along each ray front to back (the module's text), as fVDB's
    volume_render. Differentiable in sigmas, rgbs, deltas and ts.

    Args:
        sigmas: Densities [S], float32 or float64: a tensor or a JaggedTensor (one entry a
            ray).
        rgbs: Features [S, C] (any C), sigmas' dtype; a tensor or a JaggedTensor.
        deltas: Lengths of the samples' intervals [S], sigmas' dtype.
        ts: Distances of the samples along their rays [S], sigmas' dtype.
        joffsets: int64 [R + 1]: ray r owns samples joffsets[r] to joffsets[r + 1], in order
            along it; or a JaggedTensor, whose joffsets are taken.
        transmittance_threshold: In [0, 1]: the march along a ray stops once its
            transmittance falls below this; later samples weigh 0. Default 0.0 (every sample
            counts).

    Returns:
        (rgb [R, C], depth [R], opacity [R], weights [S], count [R] int64): the weighted sums
        of the features, of ts and of the weights, each sample's weight, and the number of
        samples marched on each ray.
    """
    if isinstance(joffsets, JaggedTensor):
        joffsets = joffsets.joffsets
    data = [t.jdata if isinstance(t, JaggedTensor) else t for t in (sigmas, rgbs, deltas, ts)]
    sigmas, rgbs, deltas, ts = (t.contiguous() for t in data)
    if rgbs.dim() == 1:
        raise ValueError(f"volume_render: rgbs must be [S, C], got shape {list(rgbs.shape)}")
    return _VolumeRender.apply(sigmas, rgbs, deltas, ts, joffsets.contiguous(), float(transmittance_threshold))
