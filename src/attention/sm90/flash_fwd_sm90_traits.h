#pragma once
// The Hopper flash attention forward's compile-time configuration (internal, sm_90a): tile
// shape, register split, shared-memory layouts and storage, the products' CuTe types and the
// TMA copies (Sm90Traits), and the kernel's parameters (KernelParams). The kernel that uses
// them is kernel/flash_fwd_sm90_kernel.cuh.
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "attention/common/flash_fwd_params.h"
#include "hopper/tile_scheduler.cuh"

namespace tilegrid::attention::sm90 {

using namespace cute;

template <int kHeadDim>
struct TileShape;
template <>
struct TileShape<64> {
  static constexpr int kBlockN = 128, kStages = 3;
};
template <>
struct TileShape<128> {
  static constexpr int kBlockN = 128, kStages = 2;
};
template <>
struct TileShape<256> {
  static constexpr int kBlockN = 64, kStages = 2;
};

// Register budgets (setmaxnreg) of the producer and of each consumer warpgroup: all of the
// SM's 64K registers over 128 + 128 x consumers threads, most of them to the consumers.
template <int kConsumerWarpgroups>
struct RegisterSplit;
template <>
struct RegisterSplit<2> {
  static constexpr int kProducer = 24, kConsumer = 240;
};
template <>
struct RegisterSplit<3> {
  static constexpr int kProducer = 32, kConsumer = 160;
};

// SharedStorage::o where the output tile is stored from registers.
struct NoOutputStage {};

// kProducerRegisters_: the producer warpgroup's registers after setmaxnreg, the consumers
// taking the rest of the launch allocation; 0 (the library's kernels) takes RegisterSplit's.
// Other values are built by bench/attention_variants.sh (KIND=forward) for measurement.
template <class Element_, int kHeadDim_, bool kConditionalRescale_, bool kSoftwareExp2_,
          int kConsumerWarpgroups_ = 2, int kBlockN_ = TileShape<kHeadDim_>::kBlockN,
          int kClusterM_ = 1, int kProducerRegisters_ = 0>
struct Sm90Traits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kConditionalRescale = kConditionalRescale_;
  static constexpr bool kSoftwareExp2 = kSoftwareExp2_;
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;  // 64 rows a consumer warpgroup
  static constexpr int kBlockN = kBlockN_;  // keys a tile: a multiple of 16 up to 256
  static constexpr int kStages = TileShape<kHeadDim>::kStages;
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma: N of S, K of P V");
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;  // a thread, at launch
  static constexpr int kProducerRegisters = kProducerRegisters_ > 0
                                                ? kProducerRegisters_
                                                : RegisterSplit<kConsumerWarpgroups>::kProducer;
  static constexpr int kConsumerRegisters =
      kProducerRegisters_ > 0
          ? (kLaunchRegisters * kThreads - kProducerRegisters * 128) / kConsumerThreads / 8 * 8
          : RegisterSplit<kConsumerWarpgroups>::kConsumer;
  // CTAs of a cluster: neighbouring query tiles of one (head, sequence), which read the same K
  // and V tiles; with 2, each CTA loads half of every K/V tile and the TMA multicasts it into
  // both CTAs' shared memory, halving the L2-to-SM traffic of K and V (FlashAttention-3's
  // cluster for head dims >= 128 without a mask).
  static constexpr int kClusterM = kClusterM_;
  static_assert(kClusterM == 1 || kClusterM == 2, "clusters of one or two CTAs");
  using ClusterShape = Shape<Int<kClusterM>, _1, _1>;
  // setmaxnreg moves registers within what the CTA got at launch (__launch_bounds__(kThreads,
  // 1): 65,536 / kThreads rounded down to 8 a thread): a larger split would leave a consumer
  // warp waiting for registers forever (32 / 240 with two consumer warpgroups: 65,536 > 64,512).
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * kConsumerThreads <=
                    kLaunchRegisters * kThreads,
                "register split larger than the CTA's launch allocation");
  static_assert(kProducerRegisters % 8 == 0 && kProducerRegisters >= 24 &&
                    kConsumerRegisters <= 240,
                "setmaxnreg: multiples of 8 from 24 to 240");
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using HeadDim = Int<kHeadDim>;

  // Both products on the consumer warpgroups stacked along M (64 rows each).
  using ConsumerLayout = Layout<Shape<Int<kConsumerWarpgroups>, _1, _1>>;
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, BlockN, HeadDim>>(),
      ConsumerLayout{}));
  using TiledMmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, HeadDim, BlockN>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      ConsumerLayout{}));
  // The softmax, the rescale and the epilogue index accumulators as ((2, 2, N/8), 1, 1): one
  // wgmma atom spans the whole tile in N. CuTe's selector silently splits N into smaller atoms
  // when the exact shape is not enabled (176 needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED).
  static_assert(size<1>(typename TiledMmaS::AtomShape_MNK{}) == kBlockN,
                "S = Q K^T must be one wgmma atom wide (kBlockN keys)");
  static_assert(size<1>(typename TiledMmaO::AtomShape_MNK{}) == kHeadDim,
                "O += P V must be one wgmma atom wide (kHeadDim columns)");

  // 128-byte swizzle: rows of 64 elements, the layout TMA writes and wgmma reads without bank
  // conflicts. Every head dimension here is a multiple of 64.
  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<BlockM, HeadDim>{}));
  using SmemLayoutK =
      decltype(tile_to_shape(SmemAtom{}, Shape<BlockN, HeadDim, Int<kStages>>{}));
  using SmemLayoutV = SmemLayoutK;
  // V as the (head_dim x keys) B operand of P V: same bytes, (d, n, stage) coordinates.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{}, make_ordered_layout(Shape<HeadDim, BlockN, Int<kStages>>{}, Step<_2, _1, _3>{})));

  // Global tensors as TMA sees them: (tokens, head_dim, heads, batch).
  using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
  using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                          GmemShape{}, GmemStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutQ{},
                                      Shape<BlockM, HeadDim>{}, _1{}));
  using TmaLoadKV = std::conditional_t<kClusterM == 1, SM90_TMA_LOAD, SM90_TMA_LOAD_MULTICAST>;
  using TmaKV = decltype(make_tma_copy(TmaLoadKV{}, GmemTensor{}, take<0, 2>(SmemLayoutK{}),
                                       Shape<BlockN, HeadDim>{}, Int<kClusterM>{}));
  // The output tile on its way out: converted, written to shared memory (stmatrix) and stored
  // by one TMA copy a consumer warpgroup, instead of 64 four-byte global stores a thread with
  // their address arithmetic (the persistent kernel at 512 queries issued 1,360 instructions a
  // warp and tile outside the key-tile loop against FlashAttention-3's 1,047, whose epilogue
  // works this way; bench/results/2026-12-01_h200_attention_ncu_source.csv.gz). Each
  // warpgroup's 64 rows are one contiguous 64 x d slice, the TMA box. Only where the shared
  // memory has room: head dim 64 and head dim 128 with 128-key tiles (+16-32 KB); the other
  // shapes store from registers. Not with three consumer warpgroups either: at their 160
  // registers a thread, ptxas then spilled 136 bytes, with 8 reloads in the key-tile loop.
  using SmemLayoutO =
      decltype(tile_to_shape(SmemAtom{}, Shape<_64, HeadDim, Int<kConsumerWarpgroups>>{}));
  using SmemLayoutOWarpgroup = decltype(tile_to_shape(SmemAtom{}, Shape<_64, HeadDim>{}));
  // The same bytes as the (BlockM, HeadDim) tile the products' accumulators partition: row m
  // is row m % 64 of warpgroup m / 64's slice.
  using SmemLayoutOTile = decltype(composition(
      SmemLayoutO{}, Layout<Shape<Shape<_64, Int<kConsumerWarpgroups>>, HeadDim>,
                            Stride<Stride<_1, Int<64 * kHeadDim>>, _64>>{}));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, GmemTensor{}, SmemLayoutOWarpgroup{},
                                      Shape<_64, HeadDim>{}, _1{}));
  static constexpr int kSmemBytesQKV =
      int((cosize_v<SmemLayoutQ> + 2 * cosize_v<SmemLayoutK>) * sizeof(Element));
  static constexpr bool kStoreOByTma =
      kConsumerWarpgroups == 2 &&
      kSmemBytesQKV + int(kBlockM * kHeadDim * sizeof(Element)) + 1024 <= 227 * 1024;
  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kTmaBytesKV = kBlockN * kHeadDim * sizeof(Element);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;

  struct SharedStorage {
    // 1024-byte alignment: the period of the 128-byte swizzle (8 rows of 128 bytes).
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> v;
    typename Pipeline::SharedStorage pipeline_k;
    typename Pipeline::SharedStorage pipeline_v;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType barrier_q;
    // Persistent CTAs: one thread of each consumer warpgroup arrives once its tile's products
    // have read sQ for the last time; the producer waits for that before it loads the next
    // tile's Q.
    alignas(8) cutlass::arch::ClusterBarrier::ValueType barrier_q_free;
    // Dynamic tiles: the scheduler thread hands the CTA's tiles to the loading thread and the
    // consumers through these (hopper::TileScheduler).
    alignas(8) cutlass::arch::ClusterBarrier::ValueType tile_full[2];
    alignas(8) cutlass::arch::ClusterBarrier::ValueType tile_empty[2];
    int tile_slot[2];
    [[no_unique_address]] std::conditional_t<
        kStoreOByTma, cute::array_aligned<Element, cosize_v<SmemLayoutO>, 1024>, NoOutputStage>
        o;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

template <class Traits>
struct KernelParams {
  FlashFwdParams p;
  typename Traits::TmaQ tma_q;
  typename Traits::TmaKV tma_k;
  typename Traits::TmaKV tma_v;
  typename Traits::TmaO tma_o;                  // out, with q's shape
  typename Traits::GmemShape shape_q, shape_k;  // (rows, head_dim, heads, batch)
  bool ping_pong;   // consumer warpgroups take turns to issue their products
  bool store_o_direct;  // bit 512: the output from registers even where TMA could store it
  bool persistent;  // a grid of at most one CTA per SM, each looping over tiles
  int m_blocks;     // query tiles per (head, sequence): ceil(max_seqlen_q / kBlockM)
  int section;      // persistent: (head, sequence) pairs whose tiles run together (see below)
  // Persistent with dynamic tiles (bit 64): a zeroed counter of this call; a CTA's first tile
  // is blockIdx.x, each later one gridDim.x + atomicAdd(tile_counter, 1). Null: static tiles.
  int* tile_counter;
};

}  // namespace tilegrid::attention::sm90
