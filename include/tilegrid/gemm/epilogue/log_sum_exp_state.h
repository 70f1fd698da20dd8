#pragma once
// A running log-sum-exp of float32 values that combines with one exponential: the state of
// the fused kernels' log-sum-exp row partials, host/device code so that the CPU tests check
// the formula the kernels run.
//
// In base 2: m is the largest value seen times log2(e), s the sum of 2^(x log2(e) - m) over
// the values x seen (1 <= s <= their count). Combining two states rescales the smaller one's
// sum by 2^(difference of the maxima): one exponential, where combining two log-sum-exps
// directly (hi + log(1 + e^(lo - hi))) takes an exponential and a logarithm, and a
// logarithm only at the end, when the state becomes a value.
#include <cmath>

#include "tilegrid/core/host_device.h"

namespace tilegrid::epilogue {

// 2^x for x <= 0. On the device the special-function unit's ex2.approx (relative error
// 2^-22; 2^-inf = 0); elsewhere std::exp2.
TG_HOST_DEVICE float exp2_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}

struct alignas(8) LogSumExpState {
  float m = -INFINITY;  // max of x log2(e); -inf: no value yet (the identity)
  float s = 0.0f;       // sum of 2^(x log2(e) - m)

  // The state of one value.
  TG_HOST_DEVICE static LogSumExpState of(float x) { return {x * 1.44269504f, 1.0f}; }

  // log(sum of e^x) of the values seen; -inf for none.
  TG_HOST_DEVICE float value() const {
    return m == -INFINITY ? -INFINITY : (m + std::log2(s)) * 0.693147181f;
  }
};

TG_HOST_DEVICE LogSumExpState combine(const LogSumExpState& a, const LogSumExpState& b) {
  if (b.m == -INFINITY) return a;  // also keeps -inf - -inf (NaN) out of the exponential
  if (a.m == -INFINITY) return b;
  if (a.m >= b.m) return {a.m, std::fma(b.s, exp2_nonpositive(b.m - a.m), a.s)};
  return {b.m, std::fma(a.s, exp2_nonpositive(a.m - b.m), b.s)};
}

}  // namespace tilegrid::epilogue
