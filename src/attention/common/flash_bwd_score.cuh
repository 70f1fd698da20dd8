#pragma once
// One score's part of the attention backward (internal; both tensor-core backward kernels):
// from the raw products s = q.k and dp = dO.v of a visible (query, key) pair, the recomputed
// probability P = exp(x - lse) and dX = P * (dP - D) * dx/dy, the gradient of the capped score
// x = softcap * tanh(y / softcap) (x = y without softcap) with respect to the scaled one
// y = scale * s; dQ and dK are then scale * dX K and scale * dX^T Q. lse arrives in log2 units
// (lse * log2 e), so that the exponent is one FFMA without softcap; a row past the sequence
// carries lse = +inf and gets P = 0.
#include <cmath>

#include "attention/common/flash_bwd_params.h"

namespace tilegrid::attention::flash_bwd {

constexpr float kLog2e = 1.4426950408889634f;

// The backward recomputes P from the stored float32 log-sum-exp, whose rounding (with that of
// lse * log2 e) is then P's error: up to an ulp of lse in log2 units, 2^-6 (1.1%) below
// kBackwardLseLimit = 2^18 (logits up to ~180,000), a factor 2 at 2^24 and an overflow at
// softmax_scale 1e30. Rows past the limit (the forward, which keeps the row maximum, handles
// them: common/softmax_base.cuh) get a NaN log-sum-exp here, so that their gradients come back
// NaN rather than silently wrong; lse = +-inf (no visible key, an infinite input) are kept.
constexpr float kBackwardLseLimit = 262144.f;

__device__ __forceinline__ float backward_lse_log2(float lse) {
  const float l = lse * kLog2e;
  return fabsf(l) >= kBackwardLseLimit && fabsf(l) != INFINITY ? NAN : l;
}

// 2^x: exp2f, or with kFast one ex2.approx.ftz (no denormal inputs or results; -inf gives +0,
// which rows past a sequence, lse = +inf, rely on).
template <bool kFast>
__device__ __forceinline__ float exp2_of(float x) {
  if constexpr (kFast) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    return exp2f(x);
  }
}

struct ScoreGrad {
  float p, dx;
};

struct ScoreGradFn {
  float scale_log2;  // scale * log2 e (no softcap)
  float cap_scale;   // scale / softcap; 0 without softcap
  float softcap;

  explicit __device__ __forceinline__ ScoreGradFn(const FlashBwdParams& g)
      : scale_log2(g.scale * kLog2e),
        cap_scale(g.softcap > 0 ? g.scale / g.softcap : 0.f),
        softcap(g.softcap) {}

  // P without softcap (cap_scale == 0), for kernels that form P before dP is in.
  template <bool kFastExp2 = false>
  __device__ __forceinline__ float uncapped_prob(float s, float lse_log2) const {
    return exp2_of<kFastExp2>(fmaf(s, scale_log2, -lse_log2));
  }

  // P, and P times dx/dy (P itself without softcap), for a kernel that forms P and dP in
  // different threads: dX is then p_slope * (dP - D).
  struct ProbSlope {
    float p, p_slope;
  };
  template <bool kFastExp2 = false>
  __device__ __forceinline__ ProbSlope prob_and_slope(float s, float lse_log2) const {
    if (cap_scale > 0.f) {
      const float t = tanhf(s * cap_scale);
      const float p = exp2_of<kFastExp2>(fmaf(softcap * t, kLog2e, -lse_log2));
      return {p, p * (1.f - t * t)};
    }
    const float p = exp2_of<kFastExp2>(fmaf(s, scale_log2, -lse_log2));
    return {p, p};
  }

  template <bool kFastExp2 = false>
  __device__ __forceinline__ ScoreGrad grad(float s, float dp, float lse_log2, float delta) const {
    if (cap_scale > 0.f) {
      const float t = tanhf(s * cap_scale);
      const float p = exp2_of<kFastExp2>(fmaf(softcap * t, kLog2e, -lse_log2));
      return {p, p * (dp - delta) * (1.f - t * t)};
    }
    const float p = exp2_of<kFastExp2>(fmaf(s, scale_log2, -lse_log2));
    return {p, p * (dp - delta)};
  }
  __device__ __forceinline__ ScoreGrad operator()(float s, float dp, float lse_log2,
                                                  float delta) const {
    return grad(s, dp, lse_log2, delta);
  }
};

}  // namespace tilegrid::attention::flash_bwd
