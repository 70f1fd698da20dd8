#pragma once
// An owning tensor: a TensorView plus shared ownership of its memory. Memory comes from an
// Allocator or from a DLPack producer; export to DLPack shares it with no copy.
#include <cstdint>
#include <memory>
#include <utility>

#include "tilegrid/core/allocator.h"
#include "tilegrid/core/dlpack.h"
#include "tilegrid/core/tensor_view.h"

namespace tilegrid {

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contiguous memory from `allocator` (the default allocator when null).
  static Tensor empty(const Shape& shape, DType dtype, Device device, Stream stream = {},
                      std::shared_ptr<Allocator> allocator = nullptr);

  // Takes ownership of a DLPack tensor; its deleter runs when the last Tensor sharing the
  // memory goes away. Throws (and leaves ownership with the caller) for unsupported dtypes
  // or devices.
  static Tensor from_dlpack(dlpack::DLManagedTensor* managed);

  // A contiguous copy on `device` (a copy even when the device is the same). Copies between
  // host and GPU synchronise `stream`, so the result is ready when this returns.
  Tensor to(Device device, Stream stream = {}) const;

  // A new DLManagedTensor sharing this tensor's memory; the consumer calls its deleter.
  dlpack::DLManagedTensor* to_dlpack() const;

  bool defined() const { return owner_ != nullptr; }
  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }

  void* data() const { return view_.data; }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  const Shape& shape() const { return view_.shape; }
  int64_t numel() const { return view_.numel(); }

 private:
  Tensor(TensorView view, std::shared_ptr<void> owner) : view_(view), owner_(std::move(owner)) {}

  TensorView view_;
  std::shared_ptr<void> owner_;  // frees the memory when the last owner goes
};

}  // namespace tilegrid
