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

#include "grid/batch_access.h"
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
      const double alpha = 1.0 - exp(-load_real(in.sigmas, f, i) * load_real(in.deltas, f, i));
      const double w = T * alpha;
      for (int64_t c = 0; c < width; ++c) acc[c] += w * load_real(in.rgbs, f, i * C + c0 + c);
      if (c0 == 0) {
        store_real(out.weights, f, i, w);
        depth += w * load_real(in.ts, f, i);
        opacity += w;
      }
      T *= 1.0 - alpha;
    }
    for (int64_t c = 0; c < width; ++c) store_real(out.rgb, f, r * C + c0 + c, acc[c]);
    if (c0 == 0) {
      end = i;
      store_real(out.depth, f, r, depth);
      store_real(out.opacity, f, r, opacity);
    }
  }
  for (int64_t k = end; k < last; ++k) store_real(out.weights, f, k, 0.0);
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
  const double d_depth = load_real(g.depth, f, r), d_opacity = load_real(g.opacity, f, r);
  // g_i of sample i from its weight's neighbours in the outputs.
  auto gain = [&](int64_t i) {
    double s = d_depth * load_real(in.ts, f, i) + d_opacity;
    for (int64_t c = 0; c < C; ++c)
      s += load_real(g.rgb, f, r * C + c) * load_real(in.rgbs, f, i * C + c);
    if (g.weights != nullptr) s += load_real(g.weights, f, i);
    return s;
  };
  // Pass 1: the marched samples and sum_k w_k g_k over them.
  double T = 1.0, total = 0.0;
  int64_t end = first;
  for (; end < last; ++end) {
    if (T < in.threshold) break;
    const double sd = load_real(in.sigmas, f, end) * load_real(in.deltas, f, end);
    const double alpha = 1.0 - exp(-sd);
    total += T * alpha * gain(end);
    T *= 1.0 - alpha;
  }
  // Pass 2: per-sample gradients, the suffix sum as total minus the running prefix.
  T = 1.0;
  double prefix = 0.0;
  for (int64_t i = first; i < last; ++i) {
    if (i >= end) {
      store_real(g.sigmas, f, i, 0.0);
      store_real(g.deltas, f, i, 0.0);
      store_real(g.ts, f, i, 0.0);
      for (int64_t c = 0; c < C; ++c) store_real(g.rgbs, f, i * C + c, 0.0);
      continue;
    }
    const double sigma = load_real(in.sigmas, f, i), delta = load_real(in.deltas, f, i);
    const double alpha = 1.0 - exp(-sigma * delta);
    const double w = T * alpha, T_next = T * (1.0 - alpha);
    const double gi = gain(i);
    prefix += w * gi;
    const double bracket = T_next * gi - (total - prefix);
    store_real(g.sigmas, f, i, delta * bracket);
    store_real(g.deltas, f, i, sigma * bracket);
    store_real(g.ts, f, i, w * d_depth);
    for (int64_t c = 0; c < C; ++c) store_real(g.rgbs, f, i * C + c, w * load_real(g.rgb, f, r * C + c));
    T = T_next;
  }
}

}  // namespace tilegrid::grid
