#pragma once
// Builds the TMA descriptors of one call on the host and launches the Hopper kernel for one
// (dtype, head dim, switches) (internal); included once per head dimension by
// flash_fwd_sm90_hdim<d>.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "attention/sm90/flash_fwd_sm90.h"
#include "attention/sm90/kernel/flash_fwd_sm90_kernel.cuh"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"

namespace tilegrid::attention::sm90 {

// Persistent tile order: how many (head, sequence) pairs run together so that their K and V
// (2 * keys * head_dim elements each; a variable-length batch's mean keys per sequence) take
// at most 25 MB, under half of the L2 (50 MB on an H100, 60 MB as an H200 reports it; the rest
// is for the Q and O streams); at least one pair.
inline int section_pairs(const FlashFwdParams& p, int64_t row_bytes) {
  constexpr int64_t kL2Budget = int64_t(25) << 20;
  const int64_t batch = std::max(p.batch, 1);
  const int64_t keys = p.cu_seqlens_q != nullptr ? p.rows_k / batch : int64_t(p.seqlen_k);
  const int64_t pair_bytes = 2 * std::max<int64_t>(keys, 1) * row_bytes;
  const int64_t pairs = std::max<int64_t>(int64_t(p.heads_q) * p.batch, 1);
  return int(std::clamp<int64_t>(kL2Budget / pair_bytes, 1, pairs));
}

template <class Traits>
void launch(const FlashFwdParams& p, int switches, cudaStream_t stream) {
  using Element = typename Traits::Element;
  constexpr int kSmem = Traits::kSmemBytes;
  if (p.max_seqlen_q <= 0 || p.heads_q == 0 || p.batch == 0) return;
  int device = 0;  // for the persistent grid's SM count
  TG_CUDA_CHECK(cudaGetDevice(&device));
  tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(&flash_fwd_sm90_kernel<Traits>),
                                     kSmem, "flash attention forward (sm90)");

  // Global tensors as (tokens, head_dim, heads, batch); a variable-length batch is one batch
  // of all tokens (its batch strides are zero).
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int32_t batches = varlen ? 1 : p.batch;
  const typename Traits::GmemShape shape_q(int32_t(p.rows_q), Traits::kHeadDim, p.heads_q, batches);
  const typename Traits::GmemShape shape_k(int32_t(p.rows_k), Traits::kHeadDim, p.heads_kv,
                                           batches);
  auto gmem = [](const void* ptr, const typename Traits::GmemShape& shape, int64_t row_stride,
                 int64_t head_stride, int64_t batch_stride) {
    return make_tensor(make_gmem_ptr(static_cast<const Element*>(ptr)), shape,
                       make_stride(row_stride, _1{}, head_stride, batch_stride));
  };
  KernelParams<Traits> kp{
      p,
      make_tma_copy(SM90_TMA_LOAD{},
                    gmem(p.q, shape_q, p.q_row_stride, p.q_head_stride, p.q_batch_stride),
                    typename Traits::SmemLayoutQ{},
                    Shape<typename Traits::BlockM, typename Traits::HeadDim>{}, _1{}),
      make_tma_copy(typename Traits::TmaLoadKV{},
                    gmem(p.k, shape_k, p.k_row_stride, p.k_head_stride, p.k_batch_stride),
                    take<0, 2>(typename Traits::SmemLayoutK{}),
                    Shape<typename Traits::BlockN, typename Traits::HeadDim>{},
                    Int<Traits::kClusterM>{}),
      make_tma_copy(typename Traits::TmaLoadKV{},
                    gmem(p.v, shape_k, p.v_row_stride, p.v_head_stride, p.v_batch_stride),
                    take<0, 2>(typename Traits::SmemLayoutV{}),
                    Shape<typename Traits::BlockN, typename Traits::HeadDim>{},
                    Int<Traits::kClusterM>{}),
      // The output has q's shape (the front end allocates it contiguous, or checks that it is).
      make_tma_copy(SM90_TMA_STORE{},
                    gmem(p.out, shape_q, p.out_row_stride, p.out_head_stride, p.out_batch_stride),
                    typename Traits::SmemLayoutOWarpgroup{}, Shape<_64, typename Traits::HeadDim>{},
                    _1{}),
      shape_q, shape_k, (switches & kPingPong) != 0, (switches & kDirectStoreO) != 0,
      (switches & kPersistent) != 0, (p.max_seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM,
      section_pairs(p, sizeof(Element) * Traits::kHeadDim), nullptr};  // tile_counter: below
  // Persistent: one CTA per SM (the shared memory allows no second), or one per tile if fewer;
  // the kernel counts tiles in 32 bits, up to the count plus one grid stride.
  const int64_t tiles = int64_t(kp.m_blocks) * p.heads_q * p.batch;
  kp.persistent = Traits::kClusterM == 1 && kp.persistent && tiles < (int64_t(1) << 30);
  const int64_t sms = tilegrid::cuda::multiprocessor_count(device);
  const dim3 grid = kp.persistent ? dim3(unsigned(std::min<int64_t>(tiles, sms)))
                                  : dim3(kp.m_blocks, p.heads_q, p.batch);
  // Dynamic tiles: a zeroed counter of this call from the stream-ordered pool, freed in
  // stream order after the kernel (both capturable in a CUDA graph).
  if (kp.persistent && (switches & kDynamicTiles) != 0) {
    void* counter = nullptr;
    TG_CUDA_CHECK(cudaMallocAsync(&counter, sizeof(int), stream));
    kp.tile_counter = static_cast<int*>(counter);
    if (const cudaError_t zeroed = cudaMemsetAsync(counter, 0, sizeof(int), stream);
        zeroed != cudaSuccess) {
      (void)cudaFreeAsync(counter, stream);
      TG_CUDA_CHECK(zeroed);
    }
  }
  if constexpr (Traits::kClusterM == 1) {
    flash_fwd_sm90_kernel<Traits><<<grid, Traits::kThreads, kSmem, stream>>>(kp);
  } else {
    // Clusters of kClusterM neighbouring query tiles (launch_shape checks that they divide
    // the query tiles evenly).
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(Traits::kThreads);
    config.dynamicSmemBytes = kSmem;
    config.stream = stream;
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = Traits::kClusterM;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    TG_CUDA_CHECK(cudaLaunchKernelEx(&config, flash_fwd_sm90_kernel<Traits>, kp));
  }
  // The launch's own error first (the free below would report a failed capture instead).
  const cudaError_t launched = cudaGetLastError();
  if (kp.tile_counter != nullptr) TG_CUDA_CHECK(cudaFreeAsync(kp.tile_counter, stream));
  TG_CUDA_CHECK(launched);
}

// The tile shape the switches pick for one element type and FA4 combination: three consumer
// warpgroups at head dim 64; at head dims 128 and 256 (bfloat16) 176- and 80-key tiles and
// clusters of two; else the standard one.
// kProducerRegisters: 0 for the library's kernels (Sm90Traits).
template <class Element, int kHeadDim, bool kRescale, bool kExp2, int kProducerRegisters = 0>
void launch_shape(const FlashFwdParams& p, int switches, cudaStream_t s) {
  constexpr int kNarrow = TileShape<kHeadDim>::kBlockN;
  constexpr int kRegs = kProducerRegisters;
  if constexpr (kHeadDim == 64 && !kRescale && !kExp2)
    if (switches & kThreeConsumerWarpgroups)
      return launch<Sm90Traits<Element, kHeadDim, false, false, 3, kNarrow, 1, kRegs>>(
          p, switches, s);
  if constexpr ((kHeadDim == 128 || kHeadDim == 256) && !kRescale && !kExp2 &&
                std::is_same_v<Element, cutlass::bfloat16_t>) {
    constexpr int kWide = kHeadDim == 128 ? 176 : 80;
    constexpr int kBlockM = Sm90Traits<Element, kHeadDim, false, false>::kBlockM;
    const bool wide = (switches & kWideKeyTiles) != 0;
    if (key_value_multicast_applies(p, switches, kBlockM)) {
      if (wide)
        return launch<Sm90Traits<Element, kHeadDim, false, false, 2, kWide, 2, kRegs>>(
            p, switches, s);
      return launch<Sm90Traits<Element, kHeadDim, false, false, 2, kNarrow, 2, kRegs>>(
          p, switches, s);
    }
    if (wide)
      return launch<Sm90Traits<Element, kHeadDim, false, false, 2, kWide, 1, kRegs>>(
          p, switches, s);
  }
  return launch<Sm90Traits<Element, kHeadDim, kRescale, kExp2, 2, kNarrow, 1, kRegs>>(
      p, switches, s);
}

// bfloat16: every combination of the two compile-time switches (the benchmark's table);
// float16: the default combination only, to keep the number of kernels (and the compile time)
// down.
template <int kHeadDim, int kProducerRegisters = 0>
void launch(const FlashFwdParams& p, DType dtype, int switches, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  using bf16 = cutlass::bfloat16_t;
  constexpr bool kDefaultRescale = (kDefaultCompileTimeSwitches & kConditionalRescale) != 0;
  constexpr bool kDefaultExp2 = (kDefaultCompileTimeSwitches & kSoftwareExp2) != 0;
  if (dtype == DType::Float16)
    return launch_shape<cutlass::half_t, kHeadDim, kDefaultRescale, kDefaultExp2,
                        kProducerRegisters>(p, switches, s);
  switch (switches & kCompileTimeSwitches) {
    case kNoSwitches:
      return launch_shape<bf16, kHeadDim, false, false, kProducerRegisters>(p, switches, s);
    case kConditionalRescale:
      return launch_shape<bf16, kHeadDim, true, false, kProducerRegisters>(p, switches, s);
    case kSoftwareExp2:
      return launch_shape<bf16, kHeadDim, false, true, kProducerRegisters>(p, switches, s);
    default:
      return launch_shape<bf16, kHeadDim, true, true, kProducerRegisters>(p, switches, s);
  }
}

}  // namespace tilegrid::attention::sm90
