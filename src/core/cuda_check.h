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
  // cudaSetDevice runs even when `index` is already current: since CUDA 12 it also makes the
  // device's primary context current on this thread. A thread that has made no runtime call
  // yet (PyTorch's autograd workers, a new Python thread) has none, and the driver calls that
  // encode TMA descriptors then fail (CUDA_ERROR_INVALID_CONTEXT) and the kernel that uses
  // them stops with an illegal instruction - seen on an H200 in tg.matmul's backward.
  explicit CudaDeviceGuard(int index) {
    TG_CUDA_CHECK(cudaGetDevice(&previous_));
    TG_CUDA_CHECK(cudaSetDevice(index));
  }
  ~CudaDeviceGuard() { cudaSetDevice(previous_); }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tilegrid
