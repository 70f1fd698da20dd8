#pragma once
// Epilogue primitive: write the value tile, rounded to out's dtype (float32, float16 or
// bfloat16, to nearest even). A program may store several times: the main output and
// auxiliary ones, e.g. the pre-activation that a backward pass needs. v passes through.
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::epilogue {

struct Store {
  TensorView out;  // [M, W], row-major
};

}  // namespace tilegrid::epilogue
