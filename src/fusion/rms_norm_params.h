#pragma once
// RMSNorm problem description shared by the validating front end and the CPU/CUDA back
// ends (internal). Matrices are [rows, hidden] with a row stride, in elements.
#include <cstdint>

#include "tilegrid/core/dtype.h"

namespace tilegrid::rms_norm {

struct RowMatrix {
  void* data = nullptr;
  int64_t row_stride = 0;
};

struct ForwardParams {
  int64_t rows = 0, hidden = 0;
  DType dtype = DType::Float32;         // x and y
  DType weight_dtype = DType::Float32;  // meaningful when weight != nullptr
  RowMatrix x, y;
  const void* weight = nullptr;  // [hidden] or null for all ones
  float* rstd = nullptr;         // [rows] or null
  float eps = 0.f;
};

struct BackwardParams {
  int64_t rows = 0, hidden = 0;
  DType dtype = DType::Float32;
  DType weight_dtype = DType::Float32;
  RowMatrix dy, x, dx;
  RowMatrix dresidual;  // added to dx; data null when absent
  const void* weight = nullptr;
  const float* rstd = nullptr;  // [rows]
  void* dweight = nullptr;      // [hidden], weight_dtype; null when weight is null
};

void forward_cpu(const ForwardParams& p);
void backward_cpu(const BackwardParams& p);

}  // namespace tilegrid::rms_norm
