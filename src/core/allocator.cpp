#include "tilegrid/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <utility>

#include "tilegrid/core/error.h"
#ifdef TILEGRID_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace tilegrid {
namespace {

// 256-byte alignment: enough for any vector load and for TMA descriptors (16 B needed).
constexpr size_t kAlignment = 256;

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device, Stream) override {
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    TG_CHECK(ptr != nullptr, "host allocation of ", nbytes, " bytes failed");
    return ptr;
  }
  void deallocate(void* ptr, size_t, Device, Stream) override { std::free(ptr); }
};

#ifdef TILEGRID_WITH_CUDA
// Stream-ordered allocation from the device's default memory pool.
class CudaAsyncAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device, Stream stream) override {
    CudaDeviceGuard guard(device.index);
    void* ptr = nullptr;
    TG_CUDA_CHECK(cudaMallocAsync(&ptr, nbytes, static_cast<cudaStream_t>(stream.handle)));
    return ptr;
  }
  void deallocate(void* ptr, size_t, Device device, Stream stream) override {
    CudaDeviceGuard guard(device.index);
    cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream.handle));
  }
};
#endif

struct Registry {
  std::mutex mutex;
  std::shared_ptr<Allocator> host, cuda;
};

Registry& registry() {
  static Registry r;
  return r;
}

std::shared_ptr<Allocator> builtin(DeviceType type) {
  if (type == DeviceType::CPU) return std::make_shared<HostAllocator>();
#ifdef TILEGRID_WITH_CUDA
  return std::make_shared<CudaAsyncAllocator>();
#else
  throw Error("tilegrid was built without CUDA: cannot allocate CUDA memory");
#endif
}

}  // namespace

std::shared_ptr<Allocator> default_allocator(DeviceType type) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::shared_ptr<Allocator>& slot = type == DeviceType::CPU ? r.host : r.cuda;
  if (!slot) slot = builtin(type);
  return slot;
}

void set_default_allocator(DeviceType type, std::shared_ptr<Allocator> allocator) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  (type == DeviceType::CPU ? r.host : r.cuda) = std::move(allocator);
}

}  // namespace tilegrid
