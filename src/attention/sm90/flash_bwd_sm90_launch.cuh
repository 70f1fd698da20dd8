#pragma once
// Builds the TMA descriptors of one backward call on the host and launches its three kernels
// for one (dtype, head dim) (internal); included once per head dimension by
// flash_bwd_sm90_hdim<d>.cu. The main kernel is kernel/flash_bwd_sm90_kernel.cuh at every head
// dim; its traits (and mainloop) are BwdTraits at 64 and 128, BwdHeadSplitTraits at 256.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/sm90/flash_bwd_sm90.h"
#include "attention/sm90/collective/bwd_mainloop_head_split.cuh"
#include "attention/sm90/collective/bwd_mainloop_key_rows.cuh"
#include "attention/sm90/flash_bwd_sm90_rows_kernels.cuh"
#include "attention/sm90/kernel/flash_bwd_sm90_kernel.cuh"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"

namespace tilegrid::attention::sm90_bwd {

inline unsigned tiles(int64_t n, int64_t tile) {
  return unsigned((n + tile - 1) / tile);
}

// The main kernel of a head dimension and configuration (flash_bwd_sm90_config.h), and its
// traits.
template <class Element, int kHeadDim, class Config>
using TraitsOf = std::conditional_t<(kHeadDim > 128), BwdHeadSplitTraits<Element, kHeadDim, Config>,
                                    BwdTraits<Element, kHeadDim, Config>>;
template <class Element, int kHeadDim, class Config>
constexpr auto main_kernel() {
  return &flash_bwd_sm90_kernel<TraitsOf<Element, kHeadDim, Config>>;
}

template <class Element, int kHeadDim, class Config = BwdConfig<>>
void launch(const FlashBwdParams& g, const sm90::BackwardWorkspace& ws, int max_seqlen_k,
            cudaStream_t stream) {
  using Traits = TraitsOf<Element, kHeadDim, Config>;
  constexpr auto kernel = main_kernel<Element, kHeadDim, Config>();
  constexpr int kSmem = Traits::kSmemBytes;
  const FlashFwdParams& p = g.fwd;
  if (p.batch == 0 || p.heads_q == 0 || p.max_seqlen_q <= 0) return;
  const PaddedRows rows = PaddedRows::of(p, Traits::kBlockM);
  const int64_t padded_q =
      (int64_t(p.max_seqlen_q) + Traits::kBlockM - 1) / Traits::kBlockM * Traits::kBlockM;
  preprocess_kernel<Element, kHeadDim>
      <<<dim3(tiles(padded_q, kRowsPerBlock), p.heads_q, p.batch), 32 * kRowsPerBlock, 0, stream>>>(
          g, rows, ws.lse_log2, ws.delta, ws.dq_accum, ws.dq_order);
  TG_CUDA_CHECK_LAUNCH();

  if (max_seqlen_k > 0) {
    tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem,
                                       "attention backward (sm90)");
    const bool varlen = p.cu_seqlens_q != nullptr;
    const int32_t batches = varlen ? 1 : p.batch;
    const typename Traits::GmemShape shape_q(int32_t(p.rows_q), kHeadDim, p.heads_q, batches);
    const typename Traits::GmemShape shape_k(int32_t(p.rows_k), kHeadDim, p.heads_kv, batches);
    auto gmem = [](const void* ptr, const typename Traits::GmemShape& shape, int64_t row_stride,
                   int64_t head_stride, int64_t batch_stride) {
      return make_tensor(make_gmem_ptr(static_cast<const Element*>(ptr)), shape,
                         make_stride(row_stride, _1{}, head_stride, batch_stride));
    };
    auto tma_q = [&](const void* ptr, int64_t row, int64_t head, int64_t batch) {
      return make_tma_copy(SM90_TMA_LOAD{}, gmem(ptr, shape_q, row, head, batch),
                           take<0, 2>(typename Traits::SmemLayoutQ{}),
                           Shape<typename Traits::BlockM, typename Traits::HeadDim>{}, _1{});
    };
    auto tma_k = [&](const void* ptr, int64_t row, int64_t head, int64_t batch) {
      return make_tma_copy(SM90_TMA_LOAD{}, gmem(ptr, shape_k, row, head, batch),
                           typename Traits::SmemLayoutKV{},
                           Shape<typename Traits::BlockN, typename Traits::HeadDim>{}, _1{});
    };
    const BwdKernelParams<Traits> kp{
        g,
        rows,
        ws.lse_log2,
        ws.delta,
        ws.dq_accum,
        ws.dq_order,
        tma_q(p.q, p.q_row_stride, p.q_head_stride, p.q_batch_stride),
        tma_q(g.dout, g.dout_row_stride, g.dout_head_stride, g.dout_batch_stride),
        tma_k(p.k, p.k_row_stride, p.k_head_stride, p.k_batch_stride),
        tma_k(p.v, p.v_row_stride, p.v_head_stride, p.v_batch_stride),
        shape_q,
        shape_k};
    kernel<<<dim3(tiles(max_seqlen_k, Traits::kBlockN), p.heads_kv, p.batch), Traits::kThreads,
             kSmem, stream>>>(kp);
    TG_CUDA_CHECK_LAUNCH();
  }
  if constexpr (Traits::kDqAtomic == 2) {
    // The sums in fragment order (flash_bwd_sm90_config.h): a warp takes two rows 8 apart, half
    // of their columns each, over rows rounded up to 16.
    postprocess_fragment_kernel<Element, kHeadDim>
        <<<dim3(tiles(tiles(p.max_seqlen_q, 16) * 16, kRowsPerBlock), p.heads_q, p.batch),
           32 * kRowsPerBlock, 0, stream>>>(g, rows, ws.dq_accum);
  } else {
    postprocess_kernel<Element, kHeadDim>
        <<<dim3(tiles(p.max_seqlen_q, kRowsPerBlock), p.heads_q, p.batch), 32 * kRowsPerBlock, 0,
           stream>>>(g, rows, ws.dq_accum);
  }
  TG_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
void launch(const FlashBwdParams& g, const sm90::BackwardWorkspace& ws, DType dtype,
            int max_seqlen_k, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (dtype == DType::Float16) return launch<cutlass::half_t, kHeadDim>(g, ws, max_seqlen_k, s);
  return launch<cutlass::bfloat16_t, kHeadDim>(g, ws, max_seqlen_k, s);
}

}  // namespace tilegrid::attention::sm90_bwd
