#pragma once
// Launches the portable backward for one element type (internal; included by
// flash_bwd_hdim<d>.cu, one per head dimension): delta, then dK/dV, then dQ, on one stream -
// the tensor-core kernels where the device's shared memory per block holds their tiles, else
// the CUDA-core ones (flash_bwd_simt.cuh). The attention_backward request simt
// (TILEGRID_ATTENTION_BACKWARD=simt) forces the CUDA-core kernels (for tests of that path on
// any GPU).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/attention_cuda.h"
#include "attention/cuda/flash_bwd_delta.cuh"
#include "attention/cuda/flash_bwd_dkdv_kernel.cuh"
#include "attention/cuda/flash_bwd_dq_kernel.cuh"
#include "attention/cuda/flash_bwd_simt.cuh"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "tilegrid/core/kernel_choice.h"

namespace tilegrid::attention::flash_bwd {

inline unsigned tiles(int64_t n, int64_t tile) {
  return unsigned((n + tile - 1) / tile);
}

// The current device's opt-in shared memory per block.
inline int smem_per_block_optin() {
  int device = 0, bytes = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

template <class Element, int kHeadDim>
void launch_simt(const FlashBwdParams& g, int max_seqlen_k, cudaStream_t stream) {
  using Raw =
      std::conditional_t<std::is_same_v<Element, cutlass::bfloat16_t>, __nv_bfloat16, __half>;
  const FlashFwdParams& p = g.fwd;
  const unsigned heads_q = unsigned(p.heads_q), heads_kv = unsigned(p.heads_kv);
  const unsigned batch = unsigned(p.batch);
  if (max_seqlen_k > 0) {
    simt::dkdv_kernel<Raw, kHeadDim>
        <<<dim3(tiles(max_seqlen_k, simt::kTile), heads_kv, batch), simt::kThreads, 0, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
  if (p.max_seqlen_q > 0) {
    simt::dq_kernel<Raw, kHeadDim>
        <<<dim3(tiles(p.max_seqlen_q, simt::kTile), heads_q, batch), simt::kThreads, 0, stream>>>(
            g);
    TG_CUDA_CHECK_LAUNCH();
  }
}

// Element: cutlass::half_t or cutlass::bfloat16_t.
template <class Element, int kHeadDim>
void launch(const FlashBwdParams& g, int max_seqlen_k, cudaStream_t stream) {
  using DkDv = DkDvTraits<Element, kHeadDim>;
  using Dq = DqTraits<Element, kHeadDim>;
  const FlashFwdParams& p = g.fwd;
  const unsigned heads_q = unsigned(p.heads_q), heads_kv = unsigned(p.heads_kv);
  const unsigned batch = unsigned(p.batch);
  if (batch == 0 || heads_q == 0) return;
  const bool simt_forced = requested_kernel(KernelFamily::AttentionBackward) == KernelPath::Simt;
  if (p.max_seqlen_q > 0) {
    delta_kernel<Element, kHeadDim>
        <<<dim3(tiles(p.max_seqlen_q, kDeltaRowsPerBlock), heads_q, batch), 32 * kDeltaRowsPerBlock,
           0, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
  const int limit = smem_per_block_optin();
  if (simt_forced || int(DkDv::kSmemBytes) > limit || int(Dq::kSmemBytes) > limit)
    return launch_simt<Element, kHeadDim>(g, max_seqlen_k, stream);
  if (max_seqlen_k > 0) {
    tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(&dkdv_kernel<DkDv>),
                                       int(DkDv::kSmemBytes), "attention backward (dK, dV)");
    dkdv_kernel<DkDv><<<dim3(tiles(max_seqlen_k, DkDv::kBlockN), heads_kv, batch), DkDv::kThreads,
                        DkDv::kSmemBytes, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
  if (p.max_seqlen_q > 0) {  // also where there are no keys: dq is written as zeros
    tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(&dq_kernel<Dq>),
                                       int(Dq::kSmemBytes), "attention backward (dQ)");
    dq_kernel<Dq><<<dim3(tiles(p.max_seqlen_q, Dq::kBlockM), heads_q, batch), Dq::kThreads,
                    Dq::kSmemBytes, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
}

template <int kHeadDim>
void launch(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (dtype == DType::Float16)
    launch<cutlass::half_t, kHeadDim>(g, max_seqlen_k, s);
  else
    launch<cutlass::bfloat16_t, kHeadDim>(g, max_seqlen_k, s);
}

}  // namespace tilegrid::attention::flash_bwd
