#pragma once
// A non-owning view of strided memory: what every op takes. Strides are in elements, as in
// PyTorch and DLPack >= 1.0 (never bytes).
#include <cstddef>
#include <cstdint>

#include "tilegrid/core/device.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/shape.h"

namespace tilegrid {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Device device = Device::cpu();
  Shape shape;
  Shape strides;

  TensorView() = default;
  TensorView(void* data, DType dtype, Device device, Shape shape, Shape strides)
      : data(data), dtype(dtype), device(device), shape(shape), strides(strides) {
    TG_CHECK_VALUE(shape.size() == strides.size(), "TensorView: shape ", shape, " and strides ",
                   strides, " differ in length");
  }
  // A contiguous view.
  TensorView(void* data, DType dtype, Device device, Shape shape)
      : TensorView(data, dtype, device, shape, contiguous_strides(shape)) {}

  int ndim() const { return shape.size(); }
  int64_t size(int dim) const { return shape[wrap(dim)]; }
  int64_t stride(int dim) const { return strides[wrap(dim)]; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(dtype); }

  // True when the elements are densely packed in row-major order. Extents of 1 may carry
  // any stride (PyTorch produces such views), so they are ignored; a tensor without elements
  // is contiguous whatever its strides, as torch.Tensor.is_contiguous() says.
  bool is_contiguous() const {
    if (numel() == 0) return true;
    int64_t expected = 1;
    for (int i = ndim() - 1; i >= 0; --i) {
      if (shape[i] == 1) continue;
      if (strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }

  template <class T>
  T* data_ptr() const {
    return static_cast<T*>(data);
  }

  // Negative dims count from the end, as in PyTorch.
  int wrap(int dim) const {
    int wrapped = dim < 0 ? dim + ndim() : dim;
    TG_CHECK_VALUE(wrapped >= 0 && wrapped < ndim(), "dimension ", dim,
                   " out of range for a tensor of ", ndim(), " dimensions");
    return wrapped;
  }
};

}  // namespace tilegrid
