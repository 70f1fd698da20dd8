#pragma once
// Opting a kernel into more than the default 48 KB of dynamic shared memory (internal): once
// per kernel and device, outside any stream capture that may follow, with a clear error where
// the GPU allows less than the kernel needs.
#include <cuda_runtime.h>

#include "core/cuda_check.h"

namespace tilegrid::attention {

// The kernel is a template argument so that each kernel has its own record of the devices
// done (kernels of one signature share a pointer type).
template <auto kKernel>
void allow_dynamic_smem(int bytes, const char* what) {
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  constexpr int kMaxDevices = 64;
  static bool configured[kMaxDevices] = {};
  if (device < kMaxDevices && configured[device]) return;
  int smem_limit = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TG_CHECK(bytes <= smem_limit, what, " needs ", bytes,
           " bytes of shared memory per block; this GPU allows ", smem_limit);
  TG_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (device < kMaxDevices) configured[device] = true;
}

}  // namespace tilegrid::attention
