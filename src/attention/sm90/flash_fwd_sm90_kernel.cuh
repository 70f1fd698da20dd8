#pragma once
// Hopper flash attention forward (sm_90a): one CTA per (query tile, head, sequence), a
// producer warpgroup and two consumer warpgroups of 128 threads (128-row tiles), or three
// (192-row tiles, a head-dimension-64 variant).
//  - Warpgroup 0 is the producer: it lowers its register budget to 24 (setmaxnreg) and one
//    thread issues TMA loads: the Q tile once, then K and V tiles into a kStages-deep shared
//    memory ring, each stage guarded by a "full" mbarrier (TMA transaction bytes) and an
//    "empty" one (every consumer thread's arrival), CUTLASS's PipelineTmaAsync.
//  - Warpgroups 1.. are consumers (64 query rows each) at 240 registers (160 with three).
//    Per key tile:
//    S = Q K^T with wgmma from shared memory (fp32 accumulators), softcap, mask, online softmax
//    in fp32 in log2 units, then O += P V with wgmma taking P from registers (the RS form) and
//    V from shared memory read MN-major (the K-major tile TMA wrote, coordinates swapped).
//  - Intra-warpgroup overlap: the QK^T of tile j+1 is issued before the softmax of tile j
//    runs and the PV of tile j is issued right after it, so that the tensor cores work while
//    the exponentials of the next tile are computed (FlashAttention-3's two-stage pipeline).
//  - Persistent (run-time flag): a grid of one CTA per SM at most, each looping over (query
//    tile, head, sequence) tiles, the longest query tiles first. The producer's K/V ring and
//    the consumers' read position carry over from tile to tile; the next tile's first K is
//    loaded as soon as its stage is free, its Q prefetched into L2 then and loaded once the
//    consumers' last Q K^T of the previous tile has completed (barrier_q_free), while they
//    run its last P V and write its output, so that short sequences do not pay a CTA's
//    prologue and epilogue per tile. Without the flag
//    the same loop runs once, on the tile of the CTA's grid coordinates.
//  - Clusters of two (a tile-shape variant, no mask, fixed lengths, not persistent): two
//    CTAs on neighbouring query tiles of one (head, sequence) read the same K/V tiles; each
//    loads half of every tile and the TMA multicasts it into both, and a stage is free once
//    the consumers of both CTAs have released it.
//  - Ping-pong (run-time flag): the consumer warpgroups take turns to issue their products,
//    ordered by named barriers, so that one warpgroup's softmax runs while the tensor cores
//    work on another's products instead of all waiting on the exponentials at once.
//
// Registers: 24 x 128 + 240 x 256 = 64,512 of the SM's 65,536 with two consumer warpgroups,
// 32 x 128 + 160 x 384 = 65,536 with three. Shared memory (kStages K and
// V stages plus Q, 128-byte-swizzled tiles): d = 64: 128 x 128 tiles, 3 stages, 112 KB;
// d = 128: 128 x 128, 2 stages, 160 KB; d = 256: 128 x 64, 2 stages, 192 KB (of 227 KB);
// d = 64 with three consumer warpgroups: 192 x 128 tiles, 3 stages, 120 KB; wide key tiles:
// d = 128: 128 x 176, 2 stages, 208 KB; d = 256: 128 x 80, 2 stages, 224 KB.
//
// Key tiles run from the last to the first as in the portable kernel: the tiles that need a
// mask (sequence tail, causal diagonal) come first. Rows past a sequence's end: TMA reads
// zeros past the tensor's extent; in a variable-length batch it reads the next sequence's
// (finite) tokens, which the mask hides from S, and P = 0 hides from O.
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention/common/mask.h"
#include "attention/cuda/flash_fwd_params.h"
#include "hopper/named_barriers.h"
#include "hopper/wgmma.cuh"
#include "tilegrid/attention/exp2_poly.h"

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
    // Dynamic tiles (TileSchedule): the scheduler thread writes a CTA's k-th tile into slot
    // k % 2 and arrives on tile_full[k % 2]; the loading thread and every consumer thread
    // read it and arrive on tile_empty[k % 2], after which the slot may be written again.
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

// One (query tile, head, sequence) of the grid and the key tiles it needs; the producer and
// the consumers derive the same values.
struct TileWork {
  int m_block, head, batch;
  int seqlen_q, seqlen_k, q_token0, k_token0;
  int row0, rows;        // the tile's first query row and its row count (<= kBlockM)
  KeyRange first, last;  // keys seen by the tile's first and last rows
  int n_min, n_max, n_count;  // key tiles [n_min, n_max)
  bool valid;                 // false: the tile starts past its sequence's end (nothing to do)
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ TileWork tile_work(const FlashFwdParams& p, int m_block, int head,
                                              int batch) {
  TileWork w{};
  w.m_block = m_block;
  w.head = head;
  w.batch = batch;
  w.seqlen_q = p.seqlen_q;
  w.seqlen_k = p.seqlen_k;
  if (p.cu_seqlens_q != nullptr) {
    w.q_token0 = p.cu_seqlens_q[batch];
    w.k_token0 = p.cu_seqlens_k[batch];
    w.seqlen_q = p.cu_seqlens_q[batch + 1] - w.q_token0;
    w.seqlen_k = p.cu_seqlens_k[batch + 1] - w.k_token0;
  }
  w.row0 = m_block * kBlockM;
  w.valid = w.row0 < w.seqlen_q;
  if (!w.valid) return w;  // n_count = 0
  w.rows = min(kBlockM, w.seqlen_q - w.row0);
  w.first = key_range(p, w.row0, w.seqlen_q, w.seqlen_k);
  w.last = key_range(p, w.row0 + w.rows - 1, w.seqlen_q, w.seqlen_k);
  w.n_min = w.first.lo / kBlockN;
  w.n_max = w.last.hi > w.first.lo ? (w.last.hi + kBlockN - 1) / kBlockN : w.n_min;
  w.n_count = w.n_max - w.n_min;
  return w;
}

// The tiles a CTA runs. Not persistent: its one tile, from the grid (m_block, head, batch),
// the longest (causal) query tiles first. Persistent: tiles blockIdx.x, + gridDim.x, ... of
// an order that keeps the K/V being read in L2: the (head, sequence) pairs, numbered
// batch * heads + head, are cut into sections of `section` pairs whose K and V fit in L2
// together; a section's tiles run before the next section's, longest query tiles first within
// it. (With the longest tiles of every pair first instead, the CTAs in flight read the K/V of
// up to 132 pairs at once: 66 MB at head dim 128, 1k keys, more than the 60 MB L2, and the
// kernel was 13% slower than the one-tile grid at that size; with sections, even:
// bench/results/2026-12-01_h200_attention_sm90_persistent*.json.)
struct TileSchedule {
  int count, heads, batches, m_blocks, section;
  bool persistent;
  int* counter;  // dynamic tiles (persistent only), else null

  __device__ __forceinline__ int first() const { return persistent ? int(blockIdx.x) : 0; }
  __device__ __forceinline__ int stride() const { return persistent ? int(gridDim.x) : 1; }

  // Static tiles: a CTA runs first(), first() + stride(), ... Dynamic tiles: after its first,
  // a CTA takes the next position of the order that no CTA has taken yet, so a CTA that drew
  // short tiles draws more (list scheduling; the order runs longest first within a section).
  // With a causal mask the static stride hands the same CTAs the longest tile of every round:
  // persistent CTAs measured 536 against the one-tile grid's 599 TFLOP/s at head dim 128 16k
  // causal (bench/results/2026-12-01_h200_attention_fa3_loop_variants.json), and
  // FlashAttention-3's persistent causal kernel takes its tiles this way.
  // A scheduler thread of its own (the producer warpgroup's second warp, so that the loading
  // thread's loop stays within the producer's 24 registers) takes the positions and
  // announces each, the last one (>= count) included, through two shared-memory slots. It
  // takes a position only once its slot is free, so a CTA holds at most two tiles it has not
  // started. The slot is plain shared memory between the mbarrier's arrive (release) and
  // wait (acquire); CUTLASS's barrier asm has no memory clobber, so compiler barriers keep
  // the slot's store and load between them.
  template <class Storage>
  __device__ __forceinline__ void schedule_tiles(Storage& smem) const {
    int t = first();
    for (int k = 0;; ++k) {
      if (k >= 2) {
        cutlass::arch::ClusterBarrier::wait(&smem.tile_empty[k & 1], ((k >> 1) - 1) & 1);
        asm volatile("" ::: "memory");
      }
      if (k > 0) t = int(gridDim.x) + atomicAdd(counter, 1);
      smem.tile_slot[k & 1] = t;
      asm volatile("" ::: "memory");
      cutlass::arch::ClusterBarrier::arrive(&smem.tile_full[k & 1]);
      if (t >= count) return;
    }
  }
  // The k-th tile position (k = 0, 1, ...) of the loading thread and of the consumers.
  template <class Storage>
  __device__ __forceinline__ int tile(Storage& smem, int k) const {
    if (counter == nullptr) return first() + k * stride();
    cutlass::arch::ClusterBarrier::wait(&smem.tile_full[k & 1], (k >> 1) & 1);
    asm volatile("" ::: "memory");
    const int t = smem.tile_slot[k & 1];
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&smem.tile_empty[k & 1]);
    return t;
  }
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ TileWork work(const FlashFwdParams& p, int t) const {
    if (!persistent)
      return tile_work<kBlockM, kBlockN>(p, int(gridDim.x) - 1 - int(blockIdx.x), blockIdx.y,
                                         blockIdx.z);
    const int per_section = m_blocks * section;
    const int first_pair = t / per_section * section;
    const int pairs = min(section, heads * batches - first_pair);  // the last may be short
    const int u = t - first_pair * m_blocks;
    const int pair = first_pair + u % pairs;
    return tile_work<kBlockM, kBlockN>(p, m_blocks - 1 - u / pairs, pair % heads, pair / heads);
  }
};

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// 2^x on the special-function unit; ex2.approx(-inf) = +0, which masked scores rely on.
__device__ __forceinline__ float exp2_mufu(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

using hopper::acc_as_a_operand;
using hopper::wgmma;

// One consumer warpgroup's 64 output rows through shared memory (Traits::kStoreOByTma): O /
// sum converted into the warpgroup's slice of smem.o (stmatrix), then one thread stores the
// slice by TMA. A slice is written again only once its previous store has read it (persistent
// CTAs); the kernel's last act is to wait for the stores (the slice must outlive them).
template <class Traits, class AccO>
__device__ __forceinline__ void store_o_by_tma(const KernelParams<Traits>& kp,
                                               typename Traits::SharedStorage& smem,
                                               const TileWork& w, int tid, const AccO& acc_o,
                                               const float (&inv)[2]) {
  using Element = typename Traits::Element;
  const int consumer = tid / 128;
  const int barrier_id = hopper::fwd_barrier::kOutputStore + consumer;
  const bool issues = tid % 128 == 0;
  Tensor sO = make_tensor(make_smem_ptr(smem.o.data()), typename Traits::SmemLayoutO{});
  Tensor sO_tile = make_tensor(make_smem_ptr(smem.o.data()), typename Traits::SmemLayoutOTile{});
  // Converted first, while the previous tile's store may still be reading the slice.
  Tensor rO = make_tensor<Element>(acc_o.layout());
  CUTE_UNROLL
  for (int i = 0; i < size(acc_o); ++i) rO(i) = Element(acc_o(i) * inv[(i / 2) % 2]);
  if (issues) tma_store_wait<0>();
  cutlass::arch::NamedBarrier::sync(128, barrier_id);
  auto copy_o = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{},
                                  typename Traits::TiledMmaO{});
  auto thr_copy_o = copy_o.get_thread_slice(tid);
  copy(copy_o, thr_copy_o.retile_S(rO), thr_copy_o.partition_D(sO_tile));
  // The writes made visible to the TMA (the async proxy), then all 128 threads done.
  cutlass::arch::fence_view_async_shared();
  cutlass::arch::NamedBarrier::sync(128, barrier_id);
  if (issues) {
    const int b = kp.p.cu_seqlens_q != nullptr ? 0 : w.batch;
    Tensor mO = domain_offset(make_coord(w.q_token0, _0{}),
                              kp.tma_o.get_tma_tensor(kp.shape_q)(_, _, w.head, b));
    Tensor gO = local_tile(mO, Shape<_64, typename Traits::HeadDim>{},
                           make_coord(w.m_block * Traits::kConsumerWarpgroups + consumer, _0{}));
    auto [tOgO, tOsO] = tma_partition(kp.tma_o, _0{}, Layout<_1>{},
                                      group_modes<0, 2>(sO(_, _, consumer)),
                                      group_modes<0, 2>(gO));
    copy(kp.tma_o, tOsO, tOgO);
    tma_store_arrive();
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ KernelParams<Traits> kp) {
  using Element = typename Traits::Element;
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  using HeadDim = typename Traits::HeadDim;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr float kNegInf = -INFINITY;
  const FlashFwdParams& p = kp.p;

  const TileSchedule schedule{kp.persistent ? kp.m_blocks * p.heads_q * p.batch : 1,
                              p.heads_q,
                              p.batch,
                              kp.m_blocks,
                              kp.section,
                              kp.persistent,
                              kp.persistent ? kp.tile_counter : nullptr};

  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutVt{});

  // Read through a shuffle from lane 0, so that the compiler knows it is the same in a warp
  // and keeps what derives from it (barrier ids, ping-pong's turns) in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffff, int(threadIdx.x) / 128, 0);
  const bool producer = warpgroup == 0;
  typename Pipeline::Params pipe_params;
  pipe_params.role = producer ? Pipeline::ThreadCategory::Producer
                              : Pipeline::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;
  // Arrivals that free a stage: one a consumer warpgroup (release_stage below), not one a
  // thread. With a cluster of one CTA, CUTLASS's PipelineTmaAsync sets the empty barrier's count
  // to num_consumers and lets every thread that releases arrive; FlashAttention-3 found 256
  // arrivals a stage a slowdown (its sm90_pipeline_no_cluster.hpp: hdim 128 causal most) and
  // signals from one thread a warpgroup, as CUTLASS did before 3.6. That is enough: a wgmma is
  // one operation of the warpgroup's four warps, so once it has completed for the signalling
  // thread (its warpgroup_wait) it has read its shared-memory operands for all of them.
  // In a cluster of two, every consumer warpgroup frees a stage in both CTAs (each CTA's
  // producer writes into both), and CUTLASS's pipeline picks one thread a warpgroup for each
  // destination CTA itself: there num_consumers is the thread count it expects.
  constexpr int kClusterM = Traits::kClusterM;
  pipe_params.num_consumers =
      kClusterM == 1 ? Traits::kConsumerWarpgroups : Traits::kConsumerThreads;
  // Each CTA receives the whole tile (its half and its neighbour's) and expects all its bytes.
  pipe_params.transaction_bytes = Traits::kTmaBytesKV;
  Pipeline pipeline_k(smem.pipeline_k, pipe_params, typename Traits::ClusterShape{});
  Pipeline pipeline_v(smem.pipeline_v, pipe_params, typename Traits::ClusterShape{});
  if (threadIdx.x == 0) {
    Barrier::init(&smem.barrier_q, 1);
    cutlass::arch::ClusterBarrier::init(&smem.barrier_q_free, Traits::kConsumerWarpgroups);
    for (int i = 0; i < 2; ++i) {
      cutlass::arch::ClusterBarrier::init(&smem.tile_full[i], 1);
      cutlass::arch::ClusterBarrier::init(&smem.tile_empty[i], Traits::kConsumerThreads + 1);
    }
    prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
    if constexpr (Traits::kStoreOByTma) prefetch_tma_descriptor(kp.tma_o.get_tma_descriptor());
  }
  cutlass::arch::fence_barrier_init();
  if constexpr (kClusterM > 1) {
    // Both CTAs' barriers are initialised before either multicasts into the other or arrives
    // on its barriers.
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }

  if (producer) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
    if (threadIdx.x == 32 && schedule.counter != nullptr) return schedule.schedule_tiles(smem);
    if (threadIdx.x != 0) return;
    // The K/V ring continues from tile to tile, so that a persistent CTA's next tile is
    // loaded while the consumers finish the current one.
    PipelineState state = cutlass::make_producer_start_state<Pipeline>();
    int q_loads = 0;
    // In a cluster: this CTA's half of each K/V tile, multicast into both CTAs.
    const int cta_rank = kClusterM > 1 ? int(cute::block_rank_in_cluster()) : 0;
    auto kv_copy = [&](const auto& tma, uint64_t& barrier) {
      if constexpr (kClusterM > 1)
        return tma.with(barrier, uint16_t((1 << kClusterM) - 1));
      else
        return tma.with(barrier);
    };
    for (int k = 0, t = schedule.tile(smem, 0); t < schedule.count;
         t = schedule.tile(smem, ++k)) {
      const TileWork w = schedule.work<kBlockM, kBlockN>(p, t);
      if (w.n_count == 0) continue;  // nothing to load (the consumers write zeros or nothing)
      // Coordinates of this (head, sequence) in the TMA tensors; a variable-length sequence
      // is a window of the one (total tokens) batch.
      const int b = p.cu_seqlens_q != nullptr ? 0 : w.batch;
      const int head_kv = w.head / p.group;
      Tensor mQ = domain_offset(make_coord(w.q_token0, _0{}),
                                kp.tma_q.get_tma_tensor(kp.shape_q)(_, _, w.head, b));
      Tensor mK = domain_offset(make_coord(w.k_token0, _0{}),
                                kp.tma_k.get_tma_tensor(kp.shape_k)(_, _, head_kv, b));
      Tensor mV = domain_offset(make_coord(w.k_token0, _0{}),
                                kp.tma_v.get_tma_tensor(kp.shape_k)(_, _, head_kv, b));
      Tensor gQ = local_tile(mQ, Shape<BlockM, HeadDim>{}, make_coord(w.m_block, _0{}));
      Tensor gK = local_tile(mK, Shape<BlockN, HeadDim>{}, make_coord(_, _0{}));  // (N, D, n)
      Tensor gV = local_tile(mV, Shape<BlockN, HeadDim>{}, make_coord(_, _0{}));
      auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                        group_modes<0, 2>(gQ));
      auto [tKgK, tKsK] = tma_partition(kp.tma_k, cta_rank, Layout<Int<kClusterM>>{},
                                        group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVgV, tVsV] = tma_partition(kp.tma_v, cta_rank, Layout<Int<kClusterM>>{},
                                        group_modes<0, 2>(sV), group_modes<0, 2>(gV));
      // A persistent CTA's later Q: into L2 now, while the consumers are about two key tiles
      // from the end of the previous tile, so that the load issued once sQ is free does not
      // wait on HBM (~1 us for a 32 KB tile, against ~1.6 us a 128 x 128 key tile at d = 128).
      if (q_loads > 0) prefetch(kp.tma_q, tQgQ);

      // sQ is free once every consumer thread has arrived after the previous tile's products.
      // The CTA's first Q goes first; a later tile's Q goes after its first K, whose stage the
      // consumers release while still on the previous tile, so that K load is in flight
      // before the wait for sQ rather than after it.
      auto load_q = [&] {
        if (q_loads > 0)
          cutlass::arch::ClusterBarrier::wait(&smem.barrier_q_free, (q_loads - 1) & 1);
        Barrier::arrive_and_expect_tx(&smem.barrier_q, Traits::kTmaBytesQ);
        copy(kp.tma_q.with(smem.barrier_q), tQgQ, tQsQ);
        ++q_loads;
      };
      const bool q_first = q_loads == 0;
      if (q_first) load_q();
      for (int n = w.n_max - 1; n >= w.n_min; --n) {
        pipeline_k.producer_acquire(state);
        copy(kv_copy(kp.tma_k, *pipeline_k.producer_get_barrier(state)), tKgK(_, n),
             tKsK(_, state.index()));
        if (!q_first && n == w.n_max - 1) load_q();
        pipeline_v.producer_acquire(state);
        copy(kv_copy(kp.tma_v, *pipeline_v.producer_get_barrier(state)), tVgV(_, n),
             tVsV(_, state.index()));
        ++state;
      }
    }
    // In a cluster the neighbour's consumers arrive on this CTA's barriers until they are done:
    // wait for every stage to be freed, so that this CTA (its shared memory) outlives them.
    if constexpr (kClusterM > 1) {
      pipeline_k.producer_tail(state);
      pipeline_v.producer_tail(state);
    }
    return;
  }

  // Consumers.
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
  const int tid = int(threadIdx.x) - 128;
  // The thread of each consumer warpgroup that frees K/V stages and sQ (see num_consumers; in
  // a cluster every thread calls and the pipeline lets the ones it picked arrive).
  const bool signals = tid % 128 == 0;
  auto release_stage = [&](Pipeline& pipeline, const PipelineState& stage) {
    if (kClusterM > 1 || signals) pipeline.consumer_release(stage);
  };
  typename Traits::TiledMmaS mma_s;
  typename Traits::TiledMmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);   // (MMA, 1, D/16) descriptors
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (MMA, 1, D/16, stages)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (MMA, 1, N/16, stages)
  Tensor acc_o = partition_fragment_C(mma_o, Shape<BlockM, HeadDim>{});

  // Tile coordinates of this thread's S elements: value i sits on row half (i / 2) % 2.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<BlockM, BlockN>{}));
  int thread_row[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) thread_row[r] = get<0>(tScS(2 * r));
  // Per tile (set at its start): the tile, the keys this thread's two rows see, the row
  // maxima of raw scores (the base of the exponentials; with conditional rescaling possibly
  // stale, by at most 8 in log2 units) and this thread's partial row sums.
  TileWork w{};
  KeyRange thread_keys[2];
  float row_max[2];
  float row_sum[2];
  // With conditional rescaling, O is normalised by the sum of the rounded P that P V
  // multiplies (row_sum_p), and the LSE uses the fp32 sum. Reason: with a stale maximum the
  // dominant key's P is 2^x (x <= 8) rather than exactly 1, its bfloat16 rounding no longer
  // cancels between O and the fp32 sum, and outputs were off by up to 0.023 on wide scores;
  // the LSE from the rounded sum was off by up to 0.004 (its tolerance is 2e-4). Without
  // conditional rescaling the one fp32 sum serves both, as in FlashAttention-3.
  float row_sum_p[2];
  const float scale_log2 = p.score_scale_log2;
  const float softcap_scale = p.softcap_scale;

  // Softmax of one S tile, in place: softcap, mask, online softmax; S becomes the unnormalised
  // probabilities. Leaves O alone (a P V product may still be reading and writing it) and
  // returns in `o_scale` the factor O's rows need once that product has completed.
  auto softmax = [&](auto& acc_s, int n, float (&o_scale)[2]) {
    if (softcap_scale > 0.f) {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) acc_s(i) = tanhf(acc_s(i) * softcap_scale);
    }
    const int col0 = n * kBlockN;
    if (col0 < w.last.lo || col0 + kBlockN > w.first.hi) {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) {
        const KeyRange& keys = thread_keys[(i / 2) % 2];
        const int col = col0 + get<1>(tScS(i));
        if (col < keys.lo || col >= keys.hi) acc_s(i) = kNegInf;
      }
    }
    // Both rows in one branch-free block, so that the compiler interleaves them: the maxima
    // as four independent chains of N / 16 (a row's two columns a chunk apart), the shuffles of
    // both rows together, the exponentials of both rows in one stream for the special-function
    // unit. (A branch per row serialised all of it: a row's max chain, then its exponentials,
    // then the other row's.)
    constexpr int kChunks = decltype(size<0, 2>(acc_s))::value;  // N / 8
    float tile_max[2][2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      tile_max[r][0] = row_max[r];
      tile_max[r][1] = row_max[r];
    }
    CUTE_UNROLL
    for (int j = 0; j < kChunks; ++j) {
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c)
          tile_max[r][c] = fmaxf(tile_max[r][c], acc_s(make_coord(c, r, j), 0, 0));
      }
    }
    float base[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const float m = quad_max(fmaxf(tile_max[r][0], tile_max[r][1]));
      // Move the base only when it must: always without conditional rescaling (m >= the old
      // max); with it, when the maximum grew by more than 8 in log2 units or the row saw its
      // first key. The factor for O is then 2^(old - new) (0 from -inf, the first key), else
      // exactly 1; a row with no visible key yet keeps max = -inf and base 0, which makes
      // exp2(-inf) = 0 for its masked scores.
      bool move = m > row_max[r];
      if constexpr (Traits::kConditionalRescale)
        move = move && (row_max[r] == kNegInf || (m - row_max[r]) * scale_log2 > 8.f);
      const float new_max = move ? m : row_max[r];
      o_scale[r] = move ? exp2_mufu((row_max[r] - new_max) * scale_log2) : 1.f;
      row_max[r] = new_max;
      row_sum[r] *= o_scale[r];
      if constexpr (Traits::kConditionalRescale) row_sum_p[r] *= o_scale[r];
      base[r] = new_max == kNegInf ? 0.f : new_max * scale_log2;
    }
    // Two partial sums a row (the column pairs), each a chain of N / 16 additions.
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    [[maybe_unused]] float sum_p[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // conditional rescaling
    CUTE_UNROLL
    for (int j = 0; j < kChunks; ++j) {
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c) {
          float& s = acc_s(make_coord(c, r, j), 0, 0);
          const float x = fmaf(s, scale_log2, -base[r]);
          if constexpr (Traits::kSoftwareExp2) {
            // One 8-column chunk in four on the FMA pipe: per score the special-function unit
            // needs (1 - f) / 16 of a clock and the FMA pipe (4 + 10 f) / 128 (scale, max, sum,
            // convert; ten for the polynomial), balanced near f = 0.22. exp2_poly clamps at
            // -126, so a masked score (-inf) is made an exact zero here.
            s = (j % 4 == 3) ? (s == kNegInf ? 0.f : exp2_poly(x)) : exp2_mufu(x);
          } else {
            s = exp2_mufu(x);
          }
          sum[r][c] += s;
          if constexpr (Traits::kConditionalRescale) {
            // Rounded here, where the tensor cores still work on P V, rather than after it:
            // summed in convert_p the same three instructions a score cost about 20% at head
            // dim 128 (bench/results/2026-11-30_h200_attention_sm90_rounded_rowsum.json);
            // convert_p's conversion of the rounded value is then exact.
            s = float(Element(s));
            sum_p[r][c] += s;
          }
        }
      }
    }
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      row_sum[r] += sum[r][0] + sum[r][1];
      if constexpr (Traits::kConditionalRescale) row_sum_p[r] += sum_p[r][0] + sum_p[r][1];
    }
  };
  // O's rows to the base of the last softmax, skipped by a whole warp when none of its 16 rows
  // moved its base (most tiles of a long row). It runs while the tensor cores compute the next
  // S (see the loop), but on the issue slots the other warpgroup's softmax needs: always
  // multiplied (as FlashAttention-3 does) it is kHeadDim / 2 multiplications a thread and
  // tile, 128 at head dim 256 for 32 scores; that version ran head dim 256 3-5% further from
  // FlashAttention-3 than before (ratios to FlashAttention-3 in each run:
  // bench/results/2026-12-01_h200_attention_fa3_loop_always_rescale.json against
  // ..._fa3_three_way.json).
  auto rescale_o = [&](const float (&o_scale)[2]) {
    if (!__any_sync(0xffffffff, o_scale[0] != 1.f || o_scale[1] != 1.f)) return;
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      CUTE_UNROLL
      for (int j = 0; j < size<0, 2>(acc_o); ++j) {
        acc_o(make_coord(0, r, j), 0, 0) *= o_scale[r];
        acc_o(make_coord(1, r, j), 0, 0) *= o_scale[r];
      }
    }
  };

  // The consumers' side of the K/V ring and of the Q barrier, carried from tile to tile.
  PipelineState read;  // consumer start: stage 0, phase 0
  int q_loads = 0;
  // Ping-pong: named barrier i is "consumer warpgroup i may issue"; each waits for its turn
  // (128 waiting + 128 arriving threads), issues S(n) and P(n+1) V(n+1), and hands the turn
  // to the next one, in a round that runs on from tile to tile. FlashAttention-3's
  // structure: only the steady key-tile steps take turns, a tile's first Q K^T and its last
  // P V are issued outside them, and each warpgroup waits for the K stage before it takes
  // its turn, so that none holds the turn while polling the stage's barrier. (The earlier
  // turns around every product, with every warpgroup waiting inside its turn, ran 2-3%
  // slower than no ping-pong at head dim 128: 604 vs 625 TFLOP/s at 16k full,
  // bench/results/2026-11-30_h200_attention_sm90_variants.json.) The waits are the same
  // for every warpgroup: a wait only warpgroup 0 made was a branch on the thread index
  // between the products, and it cost the kernels without ping-pong too (the stage
  // addresses left the uniform registers; plain head dim 256 16k ran 639 against 663
  // TFLOP/s, bench/results/2026-12-01_h200_attention_scheduler_variants.json against
  // ..._kv_multicast.json). Every warpgroup takes n_count - 1 turns a tile. The last one
  // hands warpgroup 0 its first turn here and after its last turn of a tile the next tile's
  // first, so warpgroup 0 need not wait for the last one's epilogue; warpgroup 0 takes the
  // one hand-over left at the end, so that every barrier completes.
  constexpr int kConsumers = Traits::kConsumerWarpgroups;
  const int consumer = warpgroup - 1;
  const bool ping_pong = kp.ping_pong;
  auto take_turn = [&] {
    if (ping_pong) cutlass::arch::NamedBarrier::sync(256, hopper::fwd_barrier::kTurn + consumer);
  };
  auto pass_turn = [&] {
    if (ping_pong)
      cutlass::arch::NamedBarrier::arrive(
          256, hopper::fwd_barrier::kTurn + (consumer + 1) % kConsumers);
  };
  if (ping_pong && consumer == kConsumers - 1)
    cutlass::arch::NamedBarrier::arrive(256, hopper::fwd_barrier::kTurn);
  for (int k = 0, t = schedule.tile(smem, 0); t < schedule.count;
       t = schedule.tile(smem, ++k)) {
    w = schedule.work<kBlockM, kBlockN>(p, t);
    if (!w.valid) continue;  // the tile starts past its sequence's end: no rows to write
    clear(acc_o);
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      thread_keys[r] = key_range(p, int64_t(w.row0) + thread_row[r], w.seqlen_q, w.seqlen_k);
      row_max[r] = kNegInf;
      row_sum[r] = 0.f;
      row_sum_p[r] = 0.f;
    }

    if (w.n_count > 0) {
      Tensor acc_s = partition_fragment_C(mma_s, Shape<BlockM, BlockN>{});
      // P in the input type, as the A operand of P V: its own registers, which an in-flight
      // P V reads, so the next tile's softmax works on acc_s and converts only afterwards.
      Tensor rP = make_tensor<Element>(acc_s.layout());
      Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
      auto convert_p = [&] {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i) rP(i) = Element(acc_s(i));
      };
      float o_scale[2];
      Barrier::wait(&smem.barrier_q, q_loads & 1);
      // First tile: S and softmax; its P V is issued together with the next tile's S.
      pipeline_k.consumer_wait(read);
      wgmma<true>(mma_s, tSrQ, tSrK(_, _, _, read.index()), acc_s);
      warpgroup_wait<0>();
      release_stage(pipeline_k, read);
      softmax(acc_s, w.n_max - 1, o_scale);  // O is still zero: rescaling it changes nothing
      convert_p();

      for (int it = 1; it < w.n_count; ++it) {
        PipelineState next = read;
        ++next;
        // S(n) = Q K(n)^T, then O += P(n+1) V(n+1): both in flight while the softmax of S(n)
        // runs on the exponential and FMA units. O takes the base of P(n+1) between the two
        // issues, in the shadow of S(n), instead of between the completion of one P V and the
        // issue of the next S, where the tensor cores would wait for it (FlashAttention-3's
        // order at head dim 256; at <= 128 it rescales after P V, which measured the same or
        // 1-2% slower here, bench/results/2026-12-01_h200_attention_rescale_position.json).
        pipeline_k.consumer_wait(next);
        take_turn();
        wgmma<true>(mma_s, tSrQ, tSrK(_, _, _, next.index()), acc_s);
        rescale_o(o_scale);
        pipeline_v.consumer_wait(read);
        warpgroup_fence_operand(rP);
        wgmma<false>(mma_o, tOrP, tOrV(_, _, _, read.index()), acc_o);
        pass_turn();
        warpgroup_wait<1>();  // S(n) is complete
        release_stage(pipeline_k, next);
        softmax(acc_s, w.n_max - 1 - it, o_scale);
        warpgroup_wait<0>();  // P V is complete: P's registers and O are free again
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(rP);
        release_stage(pipeline_v, read);
        convert_p();
        read = next;
      }
      // Every Q K^T of this tile has completed (the last one at the warpgroup_wait<1> above, or
      // before the loop): the producer may overwrite sQ while the last P V runs.
      if (signals) cutlass::arch::ClusterBarrier::arrive(&smem.barrier_q_free);
      rescale_o(o_scale);
      pipeline_v.consumer_wait(read);
      warpgroup_fence_operand(rP);
      wgmma<false>(mma_o, tOrP, tOrV(_, _, _, read.index()), acc_o);
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_o);
      release_stage(pipeline_v, read);
      ++read;
      ++q_loads;
    }

    // Epilogue: O / sum to the output type, LSE = (max * scale + log2(sum)) * ln 2; a row with
    // no visible key (sum 0) gets O = 0 and LSE = -inf, a NaN sum (a NaN or +inf score) NaN.
    float* lse_ptr = p.lse == nullptr ? nullptr
                                      : p.lse + w.batch * p.lse_batch_stride +
                                            w.head * p.lse_head_stride + w.q_token0 + w.row0;
    float inv[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const float sum_p = Traits::kConditionalRescale ? quad_sum(row_sum_p[r]) : sum;
      inv[r] = sum_p == 0.f ? 0.f : 1.f / sum_p;
      const int row = thread_row[r];
      if (lse_ptr != nullptr && tid % 4 == 0 && row < w.rows)
        lse_ptr[row] = sum == 0.f ? kNegInf : (row_max[r] * scale_log2 + log2f(sum)) * float(M_LN2);
    }
    // This warpgroup's 64 rows by TMA where they fit in shared memory and the store cannot
    // reach past the sequence: a dense batch's tensor ends with the sequence (TMA drops the
    // rows past it), a variable-length batch's does not, so there only a slice of 64 rows
    // that all belong to the sequence.
    if constexpr (Traits::kStoreOByTma) {
      const int consumer_rows = w.rows - 64 * (warpgroup - 1);
      if (!kp.store_o_direct && (p.cu_seqlens_q == nullptr || consumer_rows >= 64)) {
        store_o_by_tma(kp, smem, w, tid, acc_o, inv);
        continue;
      }
    }
    auto* o_ptr = static_cast<Element*>(p.out) + w.batch * p.out_batch_stride +
                  int64_t(w.q_token0) * p.out_row_stride + w.head * p.out_head_stride;
    Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<BlockM, HeadDim>{}));
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = thread_row[r];
      if (row < w.rows) {
        CUTE_UNROLL
        for (int j = 0; j < size<0, 2>(acc_o); ++j) {
          cutlass::AlignedArray<Element, 2> pair;
          pair[0] = Element(acc_o(make_coord(0, r, j), 0, 0) * inv[r]);
          pair[1] = Element(acc_o(make_coord(1, r, j), 0, 0) * inv[r]);
          const int col = get<1>(tOcO(make_coord(0, r, j), 0, 0));
          *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(
              o_ptr + (int64_t(w.row0) + row) * p.out_row_stride + col) = pair;
        }
      }
    }
  }  // tiles
  if (ping_pong && consumer == 0) take_turn();  // the last hand-over
  // The shared memory must outlive the TMA stores that read it.
  if constexpr (Traits::kStoreOByTma) {
    if (tid % 128 == 0) tma_store_wait<0>();
  }
}

}  // namespace tilegrid::attention::sm90
