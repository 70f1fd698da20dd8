#pragma once
// One ray of volume rendering, forward and backward (internal; host and device code, so the
// CPU loops and the CUDA kernels run the same arithmetic, in float64).
//
// Samples i of a ray, in order, with density sigma_i, length delta_i, distance t_i and
// features c_i (C channels): alpha_i = 1 - exp(-sigma_i delta_i), transmittance
// T_i = prod_{j<i} (1 - alpha_j), weight w_i = T_i alpha_i; the ray's features sum w_i c_i,
// its depth w_i t_i, its opacity w_i. The march stops before sample i once T_i falls below
// the threshold (transmittance early exit); later samples get w = 0 and no gradient.
//
// Backward, with g_i = <dC, c_i> + dDepth t_i + dOpacity + dw_i (the gradient reaching w_i):
//   dc_i = w_i dC,  dt_i = w_i dDepth,
//   dsigma_i = delta_i (T_{i+1} g_i - sum_{k>i} w_k g_k),  ddelta_i = sigma_i (same bracket),
// since dw_i/dsigma_i = delta_i T_{i+1} and dw_k/dsigma_i = -delta_i w_k for k > i.
#include <cmath>
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::grid {

struct RenderSamples {
  const void* sigmas;  // [S]
  const void* rgbs;    // [S, C]
  const void* deltas;  // [S]
  const void* ts;      // [S]
  const int64_t* offsets;  // [R + 1]
  int64_t channels;
  bool float64;  // else float32
  double threshold;
};

TG_HOST_DEVICE double render_load(const void* p, bool f64, int64_t i) {
  return f64 ? static_cast<const double*>(p)[i] : double(static_cast<const float*>(p)[i]);
}

TG_HOST_DEVICE void render_store(void* p, bool f64, int64_t i, double v) {
  if (f64)
    static_cast<double*>(p)[i] = v;
  else
    static_cast<float*>(p)[i] = float(v);
}

struct RenderOutputs {
  void* rgb;        // [R, C]
  void* depth;      // [R]
  void* opacity;    // [R]
  void* weights;    // [S]
  int64_t* count;   // [R]: samples marched before the early exit
};

// Features are summed in float64 in chunks of kRenderChunk channels (one march a chunk), so
// that any channel count is summed without rounding to the output type on the way.
constexpr int kRenderChunk = 16;

TG_HOST_DEVICE void render_ray_forward(const RenderSamples& in, int64_t r, const RenderOutputs& out) {
  const int64_t first = in.offsets[r], last = in.offsets[r + 1], C = in.channels;
  const bool f = in.float64;
  int64_t end = first;
  for (int64_t c0 = 0; c0 < (C > 0 ? C : 1); c0 += kRenderChunk) {
    const int64_t width = C - c0 < kRenderChunk ? C - c0 : kRenderChunk;
    double acc[kRenderChunk] = {};
    double T = 1.0, depth = 0.0, opacity = 0.0;
    int64_t i = first;
    for (; i < last; ++i) {
      if (T < in.threshold) break;
      const double alpha = 1.0 - exp(-render_load(in.sigmas, f, i) * render_load(in.deltas, f, i));
      const double w = T * alpha;
      for (int64_t c = 0; c < width; ++c) acc[c] += w * render_load(in.rgbs, f, i * C + c0 + c);
      if (c0 == 0) {
        render_store(out.weights, f, i, w);
        depth += w * render_load(in.ts, f, i);
        opacity += w;
      }
      T *= 1.0 - alpha;
    }
    for (int64_t c = 0; c < width; ++c) render_store(out.rgb, f, r * C + c0 + c, acc[c]);
    if (c0 == 0) {
      end = i;
      render_store(out.depth, f, r, depth);
      render_store(out.opacity, f, r, opacity);
    }
  }
  for (int64_t k = end; k < last; ++k) render_store(out.weights, f, k, 0.0);
  out.count[r] = end - first;
}

struct RenderGrads {
  const void* rgb;      // [R, C] dL/d rgb
  const void* depth;    // [R]
  const void* opacity;  // [R]
  const void* weights;  // [S] or null
  void* sigmas;         // [S] outputs
  void* rgbs;           // [S, C]
  void* deltas;         // [S]
  void* ts;             // [S]
};

TG_HOST_DEVICE void render_ray_backward(const RenderSamples& in, int64_t r, const RenderGrads& g) {
  const int64_t first = in.offsets[r], last = in.offsets[r + 1], C = in.channels;
  const bool f = in.float64;
  const double d_depth = render_load(g.depth, f, r), d_opacity = render_load(g.opacity, f, r);
  // g_i of sample i from its weight's neighbours in the outputs.
  auto gain = [&](int64_t i) {
    double s = d_depth * render_load(in.ts, f, i) + d_opacity;
    for (int64_t c = 0; c < C; ++c)
      s += render_load(g.rgb, f, r * C + c) * render_load(in.rgbs, f, i * C + c);
    if (g.weights != nullptr) s += render_load(g.weights, f, i);
    return s;
  };
  // Pass 1: the marched samples and sum_k w_k g_k over them.
  double T = 1.0, total = 0.0;
  int64_t end = first;
  for (; end < last; ++end) {
    if (T < in.threshold) break;
    const double sd = render_load(in.sigmas, f, end) * render_load(in.deltas, f, end);
    const double alpha = 1.0 - exp(-sd);
    total += T * alpha * gain(end);
    T *= 1.0 - alpha;
  }
  // Pass 2: per-sample gradients, the suffix sum as total minus the running prefix.
  T = 1.0;
  double prefix = 0.0;
  for (int64_t i = first; i < last; ++i) {
    if (i >= end) {
      render_store(g.sigmas, f, i, 0.0);
      render_store(g.deltas, f, i, 0.0);
      render_store(g.ts, f, i, 0.0);
      for (int64_t c = 0; c < C; ++c) render_store(g.rgbs, f, i * C + c, 0.0);
      continue;
    }
    const double sigma = render_load(in.sigmas, f, i), delta = render_load(in.deltas, f, i);
    const double alpha = 1.0 - exp(-sigma * delta);
    const double w = T * alpha, T_next = T * (1.0 - alpha);
    const double gi = gain(i);
    prefix += w * gi;
    const double bracket = T_next * gi - (total - prefix);
    render_store(g.sigmas, f, i, delta * bracket);
    render_store(g.deltas, f, i, sigma * bracket);
    render_store(g.ts, f, i, w * d_depth);
    for (int64_t c = 0; c < C; ++c) render_store(g.rgbs, f, i * C + c, w * render_load(g.rgb, f, r * C + c));
    T = T_next;
  }
}

}  // namespace tilegrid::grid
