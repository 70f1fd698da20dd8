#pragma once
// Memory for tensors whose size depends on the data (and for scratch space). Ops that know
// their output sizes never allocate: callers pass views. The defaults are malloc (CPU) and
// stream-ordered cudaMallocAsync (CUDA); the Python package installs an allocator backed by
// PyTorch's caching allocator so that tilegrid memory is torch memory.
#include <cstddef>
#include <memory>

#include "tilegrid/core/device.h"

namespace tilegrid {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory on `device` usable in stream order on `stream`; throws on failure.
  virtual void* allocate(size_t nbytes, Device device, Stream stream) = 0;
  // Releases memory from allocate(), in stream order on the stream it was allocated on.
  virtual void deallocate(void* ptr, size_t nbytes, Device device, Stream stream) = 0;
};

// The allocator used for `type` when an op is given none.
std::shared_ptr<Allocator> default_allocator(DeviceType type);
// Replaces it (nullptr restores the built-in default). Thread-safe.
void set_default_allocator(DeviceType type, std::shared_ptr<Allocator> allocator);

}  // namespace tilegrid
