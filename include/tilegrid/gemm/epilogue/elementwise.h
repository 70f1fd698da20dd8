#pragma once
// Epilogue primitive: elementwise activations and their derivatives.
//   Elementwise:      v = f(v)
//   ElementwiseGrad:  v = v * f'(input), the backward through f, with `input` [M, W] the
//                     pre-activation saved by the forward (an auxiliary store there).
// The formulas are host/device code, so the CPU evaluator and the GPU epilogue compute the
// same expressions.
#include <cmath>
#include <cstdint>

#include "tilegrid/core/host_device.h"
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::epilogue {

enum class Activation : uint8_t { Identity, Relu, Sigmoid, Silu, GeluTanh };

struct Elementwise {
  Activation fn = Activation::Identity;
};

struct ElementwiseGrad {
  Activation fn = Activation::Identity;
  TensorView input;  // [M, W], row-major
};

// 1 / (1 + e^-x). On the device, for float: 2^(-x log2 e) on the special-function unit
// (ex2.approx, relative error 2^-22) and its approximate reciprocal (1 ulp; 1 / inf = 0, so
// silu(x) -> -0 for very negative x): three instructions where expf and the IEEE division
// take about thirty with branches. Everywhere else std::exp and a division.
template <class T>
TG_HOST_DEVICE T sigmoid(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) {
    float e, y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(float(x) * -1.44269504f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(1.0f + e));
    return T(y);
  }
#endif
  return T(1) / (T(1) + std::exp(-x));
}

// tanh for GELU. On the device, for float: the special-function unit's tanh.approx.f32 (one
// instruction, relative error below 2^-10.98: about a quarter of a bfloat16 ulp of the output
// for x > 0; for x < 0, where 1 + t cancels, an absolute error below 2.5e-4 |x|, the CPU
// evaluator's float64 tanh being the reference). The accurate tanhf (about 20
// instructions with branches) made the fused bias + GELU epilogue of the Llama-3-8B gate/up
// GEMM (8192 x 28672) 9.2% slower than the plain GEMM on an H200; everywhere else std::tanh.
template <class T>
TG_HOST_DEVICE T gelu_tanh_of(T u) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(float(u)));
    return T(y);
  }
#endif
  return std::tanh(u);
}

// sqrt(2 / pi) and the cubic coefficient of GELU's tanh form (Hendrycks & Gimpel).
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <class T>
TG_HOST_DEVICE T activate(Activation fn, T x) {
  switch (fn) {
    case Activation::Relu:
      return x > T(0) ? x : T(0);
    case Activation::Sigmoid:
      return sigmoid(x);
    case Activation::Silu:
      return x * sigmoid(x);
    case Activation::GeluTanh:
      return T(0.5) * x * (T(1) + gelu_tanh_of(T(kGeluScale) * (x + T(kGeluCubic) * x * x * x)));
    case Activation::Identity:
      break;
  }
  return x;
}

// d activate(fn, x) / dx.
template <class T>
TG_HOST_DEVICE T activate_grad(Activation fn, T x) {
  switch (fn) {
    case Activation::Relu:
      return x > T(0) ? T(1) : T(0);
    case Activation::Sigmoid: {
      const T s = sigmoid(x);
      return s * (T(1) - s);
    }
    case Activation::Silu: {
      const T s = sigmoid(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case Activation::GeluTanh: {
      // With t = tanh z: 0.5 (1 + t) = sigmoid(2z) and 1 - t^2 = 4 sigmoid(2z) (1 -
      // sigmoid(2z)). The sigmoid form keeps the device's absolute error near 1e-7 (sigmoid's
      // 2^-22); 1 - t^2 from tanh.approx (relative error 2^-11) would carry errors of ~1e-3,
      // a bf16 ulp and more of the gradient where it is small (x around -2).
      const T s = sigmoid(T(2 * kGeluScale) * (x + T(kGeluCubic) * x * x * x));
      return s + T(2) * x * s * (T(1) - s) * T(kGeluScale) * (T(1) + T(3 * kGeluCubic) * x * x);
    }
    case Activation::Identity:
      break;
  }
  return T(1);
}

}  // namespace tilegrid::epilogue
