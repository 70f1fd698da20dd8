// Core bindings: array conversion, the allocator hook, DLPack export, JaggedTensor helpers,
// the kernel choice.
#include <Python.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "convert.h"
#include "tilegrid/core/allocator.h"
#include "tilegrid/core/jagged_tensor.h"
#include "tilegrid/core/kernel_choice.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::python {

TensorView as_view(const nb::ndarray<>& a) {
  const nb::dlpack::dtype dt = a.dtype();
  const DType dtype = dlpack::dtype_from_dlpack({dt.code, dt.bits, dt.lanes});
  const Device device = dlpack::device_from_dlpack({a.device_type(), a.device_id()});
  Shape shape, strides;
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape.push_back(static_cast<int64_t>(a.shape(i)));
    strides.push_back(a.stride(i));
  }
  return TensorView(const_cast<void*>(a.data()), dtype, device, shape, strides);
}

std::optional<TensorView> as_view(const std::optional<nb::ndarray<>>& array) {
  if (!array) return std::nullopt;
  return as_view(*array);
}

namespace {

// Serves CUDA allocations from Python callables: alloc(nbytes, device, stream) -> int
// pointer and free(pointer). The tilegrid package installs torch's caching allocator here.
class PythonAllocator final : public Allocator {
 public:
  PythonAllocator(nb::callable alloc, nb::callable free)
      : alloc_(std::move(alloc)), free_(std::move(free)) {}

  void* allocate(size_t nbytes, Device device, Stream stream) override {
    nb::gil_scoped_acquire gil;
    nb::object ptr = alloc_(nbytes, device.index, reinterpret_cast<uintptr_t>(stream.handle));
    return reinterpret_cast<void*>(nb::cast<uintptr_t>(ptr));
  }

  // Runs from destructors, also while a Python exception propagates (a frame's tensors
  // released as it unwinds): calling free_ with that exception set fails with SystemError, and
  // a C++ exception out of a destructor ends the process. So the pending exception is set
  // aside for the call and restored after it, and a failure of free_ itself is reported as
  // unraisable (as Python reports an exception in __del__) instead of thrown.
  void deallocate(void* ptr, size_t, Device, Stream) noexcept override {
    if (!Py_IsInitialized()) return;  // interpreter gone: the process is exiting
    nb::gil_scoped_acquire gil;
    nb::error_scope pending;
    try {
      free_(reinterpret_cast<uintptr_t>(ptr));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("tilegrid: returning CUDA memory to the allocator");
    }
  }

 private:
  nb::callable alloc_, free_;
};

}  // namespace

// A DLPack capsule that owns `tensor`'s memory until a consumer takes it (consumers rename
// the capsule to "used_dltensor" and take over the deleter).
nb::object to_capsule(const Tensor& tensor) {
  dlpack::DLManagedTensor* managed = tensor.to_dlpack();
  PyObject* capsule = PyCapsule_New(managed, "dltensor", [](PyObject* self) {
    if (!PyCapsule_IsValid(self, "dltensor")) return;  // consumed
    auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(self, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  });
  if (!capsule) {
    managed->deleter(managed);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

Tensor tensor_from_capsule(nb::capsule capsule) {
  PyObject* cap = capsule.ptr();
  TG_CHECK_VALUE(PyCapsule_IsValid(cap, "dltensor"),
                 "expected an unconsumed DLPack capsule "
                 "(\"dltensor\"), as Tensor.__dlpack__() returns");
  auto* managed = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  Tensor tensor = Tensor::from_dlpack(managed);  // throws before taking ownership
  PyCapsule_SetName(cap, "used_dltensor");
  PyCapsule_SetDestructor(cap, nullptr);
  return tensor;
}

namespace {

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::Bool, DType::UInt8, DType::Int32, DType::Int64, DType::Float16,
                  DType::BFloat16, DType::Float32, DType::Float64})
    if (tilegrid::name(d) == name) return d;
  throw TypeError("unknown dtype name '" + name + "'");
}

}  // namespace

void bind_core(nb::module_& m) {
  m.def(
      "set_cuda_allocator",
      [](std::optional<nb::callable> alloc, std::optional<nb::callable> free) {
        if (!alloc || !free) return set_default_allocator(DeviceType::CUDA, nullptr);
        set_default_allocator(DeviceType::CUDA, std::make_shared<PythonAllocator>(*alloc, *free));
      },
      nb::arg("alloc").none(), nb::arg("free").none(),
      "Serve tilegrid's CUDA allocations from alloc(nbytes, device, stream) -> int and "
      "free(ptr); None restores cudaMallocAsync.");

  m.def(
      "empty",
      [](std::vector<int64_t> shape, const std::string& dtype, const std::string& device_type,
         int device_index, uintptr_t stream) {
        Device device = device_type == "cuda" ? Device::cuda(device_index) : Device::cpu();
        return to_capsule(Tensor::empty(Shape(shape.begin(), shape.end()), dtype_from_name(dtype),
                                        device, as_stream(stream)));
      },
      nb::arg("shape"), nb::arg("dtype"), nb::arg("device_type"), nb::arg("device_index") = 0,
      nb::arg("stream") = 0,
      "Allocate through tilegrid's default allocator; returns a DLPack capsule.");

  m.def(
      "validate_jagged",
      [](nb::ndarray<> data, nb::ndarray<> offsets, uintptr_t stream) {
        validate_jagged(as_view(data), as_view(offsets), as_stream(stream));
      },
      nb::arg("jdata"), nb::arg("joffsets"), nb::arg("stream") = 0);

  m.def(
      "jagged_batch_index",
      [](nb::ndarray<> offsets, nb::ndarray<> jidx, uintptr_t stream) {
        jagged_batch_index(as_view(offsets), as_view(jidx), as_stream(stream));
      },
      nb::arg("joffsets"), nb::arg("jidx"), nb::arg("stream") = 0);

  // The kernel choice (tilegrid/core/kernel_choice.h) for tilegrid.kernel_choice: families
  // and paths by name, spelt as the environment variables take them.
  m.def(
      "_kernel_choice",
      [](const std::string& family) {
        const KernelFamily f = parse_kernel_family(family);
        return std::string(kernel_path_name(f, requested_kernel(f)));
      },
      nb::arg("family"));
  m.def(
      "_set_kernel_choice",
      [](const std::string& family, const std::string& value) {
        const KernelFamily f = parse_kernel_family(family);
        set_kernel_choice(f, parse_kernel_path(f, value, "set_kernel_choice: " + family));
      },
      nb::arg("family"), nb::arg("value"));
  m.def(
      "_hopper_kernels_run_on",
      [](const std::string& family, int device_index) {
        return hopper_kernels_run_on(parse_kernel_family(family), device_index);
      },
      nb::arg("family"), nb::arg("device_index"));
}

}  // namespace tilegrid::python
