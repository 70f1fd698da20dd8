#pragma once
// Launches the portable flash forward kernel for one (dtype, head dim) (internal); included
// once per head dimension by flash_fwd_hdim<d>.cu.
#include <cuda_runtime.h>

#include "attention/attention_cuda.h"
#include "attention/cuda/flash_fwd_kernel.cuh"
#include "core/cuda_check.h"

namespace tilegrid::attention::flash {

template <class Element, int kHeadDim>
void launch_forward(const FlashFwdParams& p, cudaStream_t stream) {
  using Traits = FwdTraits<Element, kHeadDim>;
  constexpr int kSmem = int(Traits::kSmemBytes);
  if (p.max_seqlen_q <= 0 || p.heads_q == 0 || p.batch == 0) return;
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  // Shared memory above the default 48 KB needs an opt-in per kernel and device (every head
  // dimension here needs it); done once, outside any stream capture that may follow.
  constexpr int kMaxDevices = 64;
  static bool configured[kMaxDevices] = {};
  if (device >= kMaxDevices || !configured[device]) {
    int smem_limit = 0;
    TG_CUDA_CHECK(
        cudaDeviceGetAttribute(&smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    TG_CHECK(kSmem <= smem_limit, "flash attention: head dimension ", kHeadDim, " needs ", kSmem,
             " bytes of shared memory per block; this GPU allows ", smem_limit);
    TG_CUDA_CHECK(cudaFuncSetAttribute(flash_fwd_kernel<Traits>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    if (device < kMaxDevices) configured[device] = true;
  }
  const dim3 grid((p.max_seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, p.heads_q, p.batch);
  flash_fwd_kernel<Traits><<<grid, Traits::kThreads, kSmem, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
void launch_forward(const FlashFwdParams& p, DType dtype, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (dtype == DType::Float16)
    launch_forward<cutlass::half_t, kHeadDim>(p, s);
  else
    launch_forward<cutlass::bfloat16_t, kHeadDim>(p, s);
}

}  // namespace tilegrid::attention::flash
