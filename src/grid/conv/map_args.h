#pragma once
// Argument checks shared by the ops over kernel maps (internal: convolution.cpp, pooling.cpp).
#include <cstdint>

#include "tilegrid/core/checks.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::grid {

// A map or an inverse map: int32 [taps, rows], contiguous.
inline void check_map(const char* op, const char* name, const TensorView& map) {
  check_dtype(op, name, map, {DType::Int32});
  check_ndim(op, name, map, 2);
  check_contiguous(op, name, map);
}

// A [rows, cols] contiguous matrix of `dtype` on `device` (the map's).
inline void check_matrix(const char* op, const char* name, const TensorView& t, int64_t rows,
                         int64_t cols, DType dtype, Device device) {
  check_dtype(op, name, t, {dtype});
  check_shape(op, name, t, {rows, cols});
  check_contiguous(op, name, t);
  TG_CHECK_VALUE(t.device == device, op, ": ", name, " is on ", t.device, " but the map is on ",
                 device);
}

// Features or gradients: a 2-D tensor of a float dtype.
inline void check_float(const char* op, const char* name, const TensorView& t) {
  check_dtype(op, name, t, {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16});
  check_ndim(op, name, t, 2);
}

}  // namespace tilegrid::grid
