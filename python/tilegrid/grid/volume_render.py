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

from .. import _C
from .._torch import current_stream
from .jagged_tensor import JaggedTensor


# torch.library custom ops with fake kernels, as the library's other ops, so that
# torch.compile(fullgraph=True) traces a render step as single nodes.
@torch.library.custom_op("tilegrid::volume_render", mutates_args=())
def _volume_render(sigmas: torch.Tensor, rgbs: torch.Tensor, deltas: torch.Tensor,
                   ts: torch.Tensor, offsets: torch.Tensor, threshold: float
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rgb, depth, opacity, weights, count = _volume_render_outputs(sigmas, rgbs, offsets)
    _C.volume_render(sigmas, rgbs, deltas, ts, offsets, threshold, rgb, depth, opacity, weights,
                     count, current_stream(sigmas))
    return rgb, depth, opacity, weights, count


def _volume_render_outputs(sigmas, rgbs, offsets):
    rays = offsets.shape[0] - 1
    return (rgbs.new_empty(rays, rgbs.shape[1]), sigmas.new_empty(rays), sigmas.new_empty(rays),
            torch.empty_like(sigmas), torch.empty(rays, dtype=torch.int64, device=sigmas.device))


@_volume_render.register_fake
def _(sigmas, rgbs, deltas, ts, offsets, threshold):
    return _volume_render_outputs(sigmas, rgbs, offsets)


@torch.library.custom_op("tilegrid::volume_render_backward", mutates_args=())
def _volume_render_backward(sigmas: torch.Tensor, rgbs: torch.Tensor, deltas: torch.Tensor,
                            ts: torch.Tensor, offsets: torch.Tensor, threshold: float,
                            d_rgb: torch.Tensor, d_depth: torch.Tensor, d_opacity: torch.Tensor,
                            d_weights: torch.Tensor | None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = [torch.empty_like(t) for t in (sigmas, rgbs, deltas, ts)]
    _C.volume_render_backward(sigmas, rgbs, deltas, ts, offsets, threshold, d_rgb, d_depth,
                              d_opacity, d_weights, *grads, current_stream(sigmas))
    return tuple(grads)


@_volume_render_backward.register_fake
def _(sigmas, rgbs, deltas, ts, offsets, threshold, d_rgb, d_depth, d_opacity, d_weights):
    return tuple(torch.empty_like(t) for t in (sigmas, rgbs, deltas, ts))


def _volume_render_setup(ctx, inputs, output):
    sigmas, rgbs, deltas, ts, offsets, threshold = inputs
    ctx.save_for_backward(sigmas, rgbs, deltas, ts, offsets)
    ctx.threshold = threshold
    ctx.mark_non_differentiable(output[4])


def _volume_render_grad(ctx, d_rgb, d_depth, d_opacity, d_weights, _d_count):
    sigmas, rgbs, deltas, ts, offsets = ctx.saved_tensors
    rays = offsets.shape[0] - 1
    # An output that took no part in the loss may come as None: its gradient is zero.
    d_rgb = d_rgb.contiguous() if d_rgb is not None else rgbs.new_zeros(rays, rgbs.shape[1])
    d_depth = d_depth.contiguous() if d_depth is not None else sigmas.new_zeros(rays)
    d_opacity = d_opacity.contiguous() if d_opacity is not None else sigmas.new_zeros(rays)
    d_weights = d_weights.contiguous() if d_weights is not None else None
    grads = _volume_render_backward(sigmas, rgbs, deltas, ts, offsets, ctx.threshold, d_rgb,
                                    d_depth, d_opacity, d_weights)
    return (*grads, None, None)


_volume_render.register_autograd(_volume_render_grad, setup_context=_volume_render_setup)


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
    return _volume_render(sigmas, rgbs, deltas, ts, joffsets.contiguous(),
                          float(transmittance_threshold))
