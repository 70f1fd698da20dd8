#pragma once
// Launches the portable backward's three kernels for one element type (internal); included by
// flash_bwd_bf16.cu and flash_bwd_f16.cu.
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/flash_bwd_kernel.cuh"
#include "core/cuda_check.h"

namespace tilegrid::attention::flash_bwd {

inline unsigned tiles(int64_t n, int64_t tile) {
  return unsigned((n + tile - 1) / tile);
}

template <class Element, int kHeadDim>
void launch(const FlashBwdParams& g, int max_seqlen_k, cudaStream_t stream) {
  const FlashFwdParams& p = g.fwd;
  const unsigned heads_q = unsigned(p.heads_q), heads_kv = unsigned(p.heads_kv);
  const unsigned batch = unsigned(p.batch);
  if (p.max_seqlen_q > 0) {
    delta_kernel<Element, kHeadDim>
        <<<dim3(tiles(p.max_seqlen_q, 8), heads_q, batch), 256, 0, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
  if (max_seqlen_k > 0) {
    dkdv_kernel<Element, kHeadDim>
        <<<dim3(tiles(max_seqlen_k, kTile), heads_kv, batch), kThreads, 0, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
  if (p.max_seqlen_q > 0) {  // also where there are no keys: dq is written as zeros
    dq_kernel<Element, kHeadDim>
        <<<dim3(tiles(p.max_seqlen_q, kTile), heads_q, batch), kThreads, 0, stream>>>(g);
    TG_CUDA_CHECK_LAUNCH();
  }
}

template <class Element>
void launch(const FlashBwdParams& g, int head_dim, int max_seqlen_k, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return launch<Element, 64>(g, max_seqlen_k, stream);
    case 96:
      return launch<Element, 96>(g, max_seqlen_k, stream);
    case 128:
      return launch<Element, 128>(g, max_seqlen_k, stream);
    case 192:
      return launch<Element, 192>(g, max_seqlen_k, stream);
    default:
      return launch<Element, 256>(g, max_seqlen_k, stream);
  }
}

}  // namespace tilegrid::attention::flash_bwd
