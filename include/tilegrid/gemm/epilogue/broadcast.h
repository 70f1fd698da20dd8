#pragma once
// Epilogue primitive: combine the value tile with a broadcast operand.
//   v(i, j) = v(i, j) (+ or *) x(i, j), where x is
//   - PerRow:    values[i], values of length M (e.g. an RMSNorm's 1/rms per token);
//   - PerColumn: values[j], values of length W, the tile's current width (a bias, a norm
//                weight);
//   - Scalar:    one number (a loss scale);
//   - Tile:      values(i, j), a full [M, W] matrix (a residual; TMA-loaded on the GPU).
// Operands are float32, float16 or bfloat16 and are read as float32 (as on the GPU).
#include <cstdint>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid::epilogue {

enum class Combine : uint8_t { Add, Multiply };

struct PerRow {
  Combine combine = Combine::Multiply;
  TensorView values;  // [M], contiguous
};

struct PerColumn {
  Combine combine = Combine::Add;
  TensorView values;  // [W], contiguous
};

struct Scalar {
  Combine combine = Combine::Multiply;
  double value = 1.0;
};

struct Tile {
  Combine combine = Combine::Add;
  TensorView values;  // [M, W], row-major
};

}  // namespace tilegrid::epilogue
