#pragma once
// Epilogue primitive: transforms of adjacent column pairs (2j, 2j + 1) of an interleaved
// layout, which one thread holds together in a wgmma accumulator fragment.
//   Glu:      [g0, u0, g1, u1, ...] -> act(g_j) * u_j; the width halves (SwiGLU with Silu,
//             GeGLU with GeluTanh). Gate and up projections are fused by interleaving the
//             rows of their weights.
//   GluGrad:  v = d(out) [M, W] and `input` the saved [M, 2W] pre-activation (g, u) pairs ->
//             interleaved (dg_j, du_j) = (v_j * u_j * act'(g_j), v_j * act(g_j)); the width
//             doubles.
//   Rope:     (x0, x1) -> (x0 cos t - x1 sin t, x0 sin t + x1 cos t) with
//             t = positions[i] * frequencies[j] for pair j; `inverse` rotates by -t (the
//             backward). A pair with frequency 0 is left as it is, so one frequency vector
//             can rotate the q and k columns of a fused QKV output and leave v alone.
#include <cmath>
#include <type_traits>

#include "tilegrid/core/tensor_view.h"
#include "tilegrid/gemm/epilogue/elementwise.h"

namespace tilegrid::epilogue {

struct Glu {
  Activation act = Activation::Silu;
};

struct GluGrad {
  Activation act = Activation::Silu;
  TensorView input;  // [M, 2W], row-major
};

struct Rope {
  TensorView positions;    // [M]: int32, int64 or float32
  TensorView frequencies;  // [W / 2]: float32
  bool inverse = false;
};

// One gated pair (g, u) -> act(g) * u: the CPU evaluator's and the fused kernel's formula.
template <class T>
TG_HOST_DEVICE T glu(Activation act, T g, T u) {
  return activate(act, g) * u;
}

// The backward of one gated pair: dy = d(act(g) * u) -> (dg, du) = (dy * u * act'(g),
// dy * act(g)): the CPU evaluator's and the fused kernel's formula.
template <class T>
TG_HOST_DEVICE void glu_grad(Activation act, T dy, T g, T u, T& dg, T& du) {
  dg = dy * u * activate_grad(act, g);
  du = dy * activate(act, g);
}

// sin t and cos t. In float32 on the GPU: one range reduction to [-pi, pi] (2 pi in two
// float32 parts; the reduced angle is off by less than 1e-6 for |t| < 2^17, against an error
// of |t| * 6e-8 that the float32 angle position * frequency already carries) and the
// special-function unit's sine and cosine (absolute error 2^-21.4 on [-pi, pi]). Precise
// cosf and sinf keep a slow path for large angles, and with them the fused RoPE program took
// 1.79x the plain product's time on an H200.
template <class T>
TG_HOST_DEVICE void sin_cos(T t, T& s, T& c) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    const float k = rintf(t * 0.159154943f);     // turns: t / (2 pi), rounded
    float r = fmaf(-k, 6.28318548f, t);          // float(2 pi)
    r = fmaf(-k, -1.74845553e-7f, r);            // 2 pi - float(2 pi)
    __sincosf(r, &s, &c);
    return;
  }
#endif
  s = std::sin(t);
  c = std::cos(t);
}

// One pair (x0, x1) rotated by angle t, in place: the CPU evaluator's and the fused kernel's
// formula.
template <class T>
TG_HOST_DEVICE void rotate_pair(T& x0, T& x1, T t) {
  T s, c;
  sin_cos(t, s, c);
  const T y0 = x0 * c - x1 * s;
  x1 = x0 * s + x1 * c;
  x0 = y0;
}

}  // namespace tilegrid::epilogue
