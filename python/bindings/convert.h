#pragma once
// Conversions between Python-side objects and the C++ API (internal to the module).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>

#include "tilegrid/core/tensor.h"

namespace tilegrid::python {

namespace nb = nanobind;

// Any DLPack-capable array (a torch.Tensor) as a TensorView; nothing is copied.
TensorView as_view(const nb::ndarray<>& array);
std::optional<TensorView> as_view(const std::optional<nb::ndarray<>>& array);

// A CUDA stream handle passed from Python as an integer (torch's Stream.cuda_stream).
inline Stream as_stream(uintptr_t handle) {
  return Stream{reinterpret_cast<void*>(handle)};
}

// Takes over a "dltensor" capsule (from torch's Tensor.__dlpack__()): zero copy, and the
// producer's memory stays alive as long as the returned Tensor.
Tensor tensor_from_capsule(nb::capsule capsule);
// Hands a Tensor to Python as a "dltensor" capsule (torch.from_dlpack takes it).
nb::object to_capsule(const Tensor& tensor);

void bind_core(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_fusion(nb::module_& m);
void bind_gemm(nb::module_& m);
void bind_grid(nb::module_& m);

}  // namespace tilegrid::python
