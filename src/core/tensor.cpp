#include "tilegrid/core/tensor.h"

#include <array>
#include <cstdint>
#include <cstring>

#ifdef TILEGRID_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace tilegrid {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Stream stream,
                     std::shared_ptr<Allocator> allocator) {
  // The byte size, and every stride in bytes (zero extents count as one there), must fit in an
  // int64: a shape read from a file can be anything.
  uint64_t nbytes = itemsize(dtype), span = itemsize(dtype);
  for (int64_t d : shape) {
    TG_CHECK_VALUE(d >= 0, "Tensor::empty: negative extent in ", shape);
    TG_CHECK_VALUE(!__builtin_mul_overflow(nbytes, uint64_t(d), &nbytes) &&
                       !__builtin_mul_overflow(span, uint64_t(d > 1 ? d : 1), &span) &&
                       span <= uint64_t(INT64_MAX),
                   "Tensor::empty: a tensor of shape ", shape, " and dtype ", name(dtype),
                   " would take more than 2^63 bytes");
  }
  if (!allocator) allocator = default_allocator(device.type);
  void* ptr = nbytes ? allocator->allocate(nbytes, device, stream) : nullptr;
  std::shared_ptr<void> owner(ptr, [allocator, nbytes, device, stream](void* p) {
    if (p) allocator->deallocate(p, nbytes, device, stream);
  });
  return Tensor(TensorView(ptr, dtype, device, shape), std::move(owner));
}

Tensor Tensor::from_dlpack(dlpack::DLManagedTensor* managed) {
  TG_CHECK_VALUE(managed != nullptr, "Tensor::from_dlpack: null DLManagedTensor");
  const dlpack::DLTensor& t = managed->dl_tensor;
  TG_CHECK_VALUE(t.ndim >= 0 && t.ndim <= Shape::kMaxDims, "Tensor::from_dlpack: ", t.ndim,
                 " dimensions; tilegrid tensors have at most ", Shape::kMaxDims);
  DType dtype = dlpack::dtype_from_dlpack(t.dtype);
  Device device = dlpack::device_from_dlpack(t.device);
  Shape shape(t.shape, t.shape + t.ndim);
  Shape strides = t.strides ? Shape(t.strides, t.strides + t.ndim) : contiguous_strides(shape);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  std::shared_ptr<void> owner(managed, [](void* m) {
    auto* self = static_cast<dlpack::DLManagedTensor*>(m);
    if (self->deleter) self->deleter(self);
  });
  return Tensor(TensorView(data, dtype, device, shape, strides), std::move(owner));
}

Tensor Tensor::to(Device device, Stream stream) const {
  TG_CHECK_VALUE(view_.is_contiguous(), "Tensor::to: the tensor must be contiguous, got shape ",
                 view_.shape, " with strides ", view_.strides);
  Tensor out = Tensor::empty(view_.shape, view_.dtype, device, stream);
  const size_t nbytes = view_.nbytes();
  if (nbytes == 0) return out;
  if (device.is_cpu() && view_.device.is_cpu()) {
    std::memcpy(out.data(), view_.data, nbytes);
    return out;
  }
#ifdef TILEGRID_WITH_CUDA
  CudaDeviceGuard guard(device.is_cuda() ? device.index : view_.device.index);
  auto s = static_cast<cudaStream_t>(stream.handle);
  TG_CUDA_CHECK(cudaMemcpyAsync(out.data(), view_.data, nbytes, cudaMemcpyDefault, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
#else
  throw Error("tilegrid was built without CUDA: cannot copy to or from a CUDA device");
#endif
}

namespace {
// What an exported DLManagedTensor points back to: the shape arrays and a share of the memory.
struct ExportContext {
  dlpack::DLManagedTensor managed;
  std::array<int64_t, Shape::kMaxDims> shape, strides;
  std::shared_ptr<void> owner;
};
}  // namespace

dlpack::DLManagedTensor* Tensor::to_dlpack() const {
  auto* ctx = new ExportContext{};
  for (int i = 0; i < view_.ndim(); ++i) {
    ctx->shape[i] = view_.shape[i];
    ctx->strides[i] = view_.strides[i];
  }
  ctx->owner = owner_;
  dlpack::DLTensor& t = ctx->managed.dl_tensor;
  t.data = view_.data;
  t.device = dlpack::to_dlpack(view_.device);
  t.ndim = view_.ndim();
  t.dtype = dlpack::to_dlpack(view_.dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](dlpack::DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
  };
  return &ctx->managed;
}

}  // namespace tilegrid
