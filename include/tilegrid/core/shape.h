#pragma once
// A tensor's extents (or strides) with inline storage: no heap traffic on the API path.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

#include "tilegrid/core/error.h"

namespace tilegrid {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  template <class It>
  Shape(It first, It last) {
    assign(first, last);
  }

  int size() const { return ndim_; }
  bool empty() const { return ndim_ == 0; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }

  void push_back(int64_t d) {
    TG_CHECK_VALUE(ndim_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    dims_[ndim_++] = d;
  }
  int64_t back() const { return dims_[ndim_ - 1]; }

  // Product of all extents (1 for a scalar).
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[i];
    return n;
  }

  bool operator==(const Shape& other) const {
    if (ndim_ != other.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
      if (dims_[i] != other.dims_[i]) return false;
    return true;
  }

 private:
  template <class It>
  void assign(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

// Row-major (C-contiguous) strides, in elements.
inline Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t stride = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i] > 1 ? shape[i] : 1;
  }
  return strides;
}

inline void append(std::string& s, const Shape& shape) {
  s += '[';
  for (int i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    detail::append(s, shape[i]);
  }
  s += ']';
}

inline std::ostream& operator<<(std::ostream& os, const Shape& shape) {
  os << '[';
  for (int i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  return os << ']';
}

}  // namespace tilegrid
