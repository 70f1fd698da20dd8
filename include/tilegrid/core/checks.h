#pragma once
// Argument checks shared by every public entry point. Each names the op and the argument,
// and says what was expected and what was given, before any kernel runs.
#include <initializer_list>
#include <string_view>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid {

// `op: arg must be one of {float32, bfloat16}, got int64` (TypeError).
void check_dtype(std::string_view op, std::string_view arg, const TensorView& t,
                 std::initializer_list<DType> allowed);

// `op: arg must have 2 dimensions, got shape [3]` (ValueError).
void check_ndim(std::string_view op, std::string_view arg, const TensorView& t, int ndim);

// `op: arg is on cuda:1 but x is on cuda:0` (ValueError).
void check_same_device(std::string_view op, std::string_view arg, const TensorView& t,
                       std::string_view ref_arg, const TensorView& ref);

// `op: arg must have shape [4096], got [4095]` (ValueError).
void check_shape(std::string_view op, std::string_view arg, const TensorView& t,
                 const Shape& expected);

// Contiguous in row-major order, or in the last dimension only (ValueError).
void check_contiguous(std::string_view op, std::string_view arg, const TensorView& t);
void check_last_dim_contiguous(std::string_view op, std::string_view arg, const TensorView& t);

// A non-null pointer unless the tensor is empty (ValueError).
void check_data(std::string_view op, std::string_view arg, const TensorView& t);

}  // namespace tilegrid
