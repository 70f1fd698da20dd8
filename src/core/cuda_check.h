#pragma once
// Internal CUDA helpers: error checking with the failing call named, and a device guard.
#include <cuda_runtime_api.h>

#include "tilegrid/core/error.h"

#define TG_CUDA_CHECK(call)                                                                    \
  do {                                                                                         \
    cudaError_t tg_status_ = (call);                                                           \
    if (tg_status_ != cudaSuccess)                                                             \
      throw ::tilegrid::Error(                                                                 \
          ::tilegrid::detail::concat(#call, " failed: ", cudaGetErrorString(tg_status_), " (", \
                                     __FILE__, ":", __LINE__, ")"));                           \
  } while (0)

// Checks the launch that just happened (bad configuration, missing kernel image).
#define TG_CUDA_CHECK_LAUNCH() TG_CUDA_CHECK(cudaGetLastError())

namespace tilegrid {

// Makes `index` the current device for a scope and restores the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int index) {
    TG_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) TG_CUDA_CHECK(cudaSetDevice(index));
  }
  ~CudaDeviceGuard() { cudaSetDevice(previous_); }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tilegrid
