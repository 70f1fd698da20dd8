#pragma once
// Reading and writing one floating-point element of any storage type, for CPU reference code:
// load_element widens to double (exact for every float type), store_element rounds to the
// storage type to nearest even, as the GPU's conversions do.
#include <cstdint>

#include "tilegrid/core/dtype.h"
#include "tilegrid/core/error.h"
#include "tilegrid/core/half_convert.h"

namespace tilegrid {

inline double load_element(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::Float64:
      return static_cast<const double*>(base)[i];
    case DType::Float32:
      return static_cast<const float*>(base)[i];
    case DType::Float16:
      return float16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::BFloat16:
      return bfloat16_to_float(static_cast<const uint16_t*>(base)[i]);
    default:
      throw TypeError(detail::concat("load_element: not a float dtype: ", dtype));
  }
}

inline void store_element(DType dtype, void* base, int64_t i, double v) {
  switch (dtype) {
    case DType::Float64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::Float32:
      static_cast<float*>(base)[i] = float(v);
      return;
    case DType::Float16:
      static_cast<uint16_t*>(base)[i] = float_to_float16(float(v));
      return;
    case DType::BFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bfloat16(float(v));
      return;
    default:
      throw TypeError(detail::concat("store_element: not a float dtype: ", dtype));
  }
}

}  // namespace tilegrid
