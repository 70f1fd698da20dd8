#pragma once
// Differentiable volume rendering of samples along rays (fVDB's volume_render): ray r owns
// samples offsets[r] .. offsets[r+1] in order; each has a density sigma, a length delta, a
// distance t and C features. alpha = 1 - exp(-sigma delta), transmittance T = product of
// (1 - alpha) before the sample, weight w = T alpha; the ray's features are sum w c, its depth
// sum w t, its opacity sum w. Samples reached once T < transmittance_threshold are skipped
// (w = 0, no gradient); count[r] says how many were marched. Any channel count; float32 or
// float64 (one dtype), sums in float64; CPU (one thread a ray:
// src/grid/render/volume_render_ray.h) or one CUDA device (one warp a ray, in windows of 128
// samples: src/grid/render/volume_render_cuda.cu; the same sums in another order, equal to the
// CPU's to rounding). Outputs and gradients are overwritten.
#include <cstdint>
#include <optional>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid::grid {

struct VolumeRenderInputs {
  TensorView sigmas;   // [S]
  TensorView rgbs;     // [S, C]
  TensorView deltas;   // [S]
  TensorView ts;       // [S]
  TensorView offsets;  // int64 [R + 1], from 0, non-decreasing, ending at S
  double transmittance_threshold = 0.0;
};

// rgb [R, C], depth [R], opacity [R], weights [S] (the rays' dtype), count int64 [R].
void volume_render(const VolumeRenderInputs& in, const TensorView& rgb, const TensorView& depth,
                   const TensorView& opacity, const TensorView& weights, const TensorView& count,
                   Stream stream = {});

// The gradients of the inputs from those of the outputs (grad_weights optional).
void volume_render_backward(const VolumeRenderInputs& in, const TensorView& grad_rgb,
                            const TensorView& grad_depth, const TensorView& grad_opacity,
                            const std::optional<TensorView>& grad_weights,
                            const TensorView& grad_sigmas, const TensorView& grad_rgbs,
                            const TensorView& grad_deltas, const TensorView& grad_ts,
                            Stream stream = {});

}  // namespace tilegrid::grid
