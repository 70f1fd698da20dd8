#pragma once
// Element types a tilegrid tensor can hold. The set mirrors what PyTorch users pass:
// the float types of training, the integer types of indices and offsets, and bool masks.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace tilegrid {

enum class DType : uint8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };

constexpr size_t itemsize(DType dtype) {
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8:
      return 1;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
      return 8;
  }
  return 0;
}

constexpr std::string_view name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "bool";
    case DType::UInt8:
      return "uint8";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "?";
}

constexpr bool is_floating_point(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 ||
         dtype == DType::Float64;
}

inline std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << name(dtype);
}
inline void append(std::string& s, DType dtype) {
  s += name(dtype);
}

}  // namespace tilegrid
