#pragma once
// Epilogue primitive: elementwise activations and their derivatives.
//   Elementwise:      v = f(v)
//   ElementwiseGrad:  v = v * f'(input), the backward through f, with `input` [M, W] the
//                     pre-activation saved by the forward (an auxiliary store there).
// The formulas are host/device code, so the CPU evaluator and the GPU epilogue compute the
// same expressions.
#include <cmath>

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

template <class T>
TG_HOST_DEVICE T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
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
      return T(0.5) * x * (T(1) + std::tanh(T(kGeluScale) * (x + T(kGeluCubic) * x * x * x)));
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
      const T t = std::tanh(T(kGeluScale) * (x + T(kGeluCubic) * x * x * x));
      return T(0.5) * (T(1) + t) +
             T(0.5) * x * (T(1) - t * t) * T(kGeluScale) * (T(1) + T(3 * kGeluCubic) * x * x);
    }
    case Activation::Identity:
      break;
  }
  return T(1);
}

}  // namespace tilegrid::epilogue
