#pragma once
// Launches the portable flash forward kernel for one (dtype, head dim) (internal); included
// once per head dimension by flash_fwd_hdim<d>.cu.
#include <cuda_runtime.h>

#include "attention/attention_cuda.h"
#include "attention/cuda/flash_fwd_kernel.cuh"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"

namespace tilegrid::attention::flash {

template <class Element, int kHeadDim>
void launch_forward(const FlashFwdParams& p, cudaStream_t stream) {
  using Traits = FwdTraits<Element, kHeadDim>;
  constexpr int kSmem = int(Traits::kSmemBytes);
  if (p.max_seqlen_q <= 0 || p.heads_q == 0 || p.batch == 0) return;
  tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(&flash_fwd_kernel<Traits>),
                                     kSmem, "flash attention forward");
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
