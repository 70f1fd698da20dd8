#pragma once
// Epilogue primitive: sums along M, one per column: out[j] = sum over i of v(i, j), float32
// [W]. v passes through unchanged. This is the bias gradient of a linear layer (on dy) and,
// with a PerColumn multiply before it, a norm weight's gradient.
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::epilogue {

struct ColumnSum {
  TensorView out;  // float32 [W], contiguous
};

}  // namespace tilegrid::epilogue
