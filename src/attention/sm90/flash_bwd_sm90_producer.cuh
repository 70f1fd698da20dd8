#pragma once
// What the Hopper attention backward kernel (kernel/flash_bwd_sm90_kernel.cuh) and both of its
// consumer mainloops (collective/bwd_mainloop_key_rows.cuh, head dims 64 and 128;
// collective/bwd_mainloop_head_split.cuh, head dim 256) share (internal, sm_90a): the kernel
// parameters, the keys and query tiles of a CTA, the order of the dQ additions under
// deterministic=True, the Q/dO pipeline's set-up and the producer warpgroup (its loading thread
// and its dQ writer warp). The traits of a head-dim family name its tile sizes, shared-memory
// layouts and storage (SharedStorage with k, v, q, dout, dq, lse, delta, pipeline,
// barrier_kv), TMA types, named barriers and its Mainloop; the families differ only in their
// consumer warpgroups.
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "attention/common/flash_bwd_params.h"
#include "attention/common/mask.h"
#include "attention/common/sequence.h"
#include "attention/sm90/flash_bwd_sm90_config.h"
#include "attention/sm90/flash_bwd_sm90_rows.h"
#include "core/cuda_ordered_counter.cuh"
#include "hopper/bulk_reduce.cuh"
#include "hopper/named_barriers.h"

namespace tilegrid::attention::sm90_bwd {

using namespace cute;

// What the traits of both kernels share: kBlockN keys a CTA, kBlockM queries a step,
// kStages Q/dO stages, the config's choices (flash_bwd_sm90_config.h); the K/V and Q/dO tiles
// in shared memory (and their transposed views), their TMA copies, the dQ product and its
// float32 tile, the named barriers of the dQ writer and the pipeline. A kernel's traits add its
// score and dK/dV products, its dS buffers and its SharedStorage.
template <class Element_, int kHeadDim_, int kBlockN_, int kStages_, class Config_>
struct BwdTraitsBase {
  using Element = Element_;
  using Config = Config_;
  static constexpr bool kFastExp2 = Config::kFastExp2;
  static constexpr int kDqAtomic = Config::kDqAtomic;  // 0, 1 or 2 (flash_bwd_sm90_config.h)
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kStatsEarly = Config::on_or(Config::kStatsEarly, kHeadDim == 128);
  static constexpr bool kSplitExp = Config::on_or(Config::kSplitExp, kHeadDim == 64);
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockM = block_m(kHeadDim);
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerThreads = 256;
  static constexpr int kThreads = 128 + kConsumerThreads;
  // Registers a thread after setmaxnreg (flash_bwd_sm90_config.h, kProducerRegisters): the
  // consumers share what the producer leaves of the CTA's launch allocation (65,536 / 384
  // threads = 168 a thread, in multiples of 8), in multiples of 8.
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegisters =
      Config::producer_registers_or(kHeadDim == 64 ? 24 : 40);
  static constexpr int kConsumerRegisters =
      (kLaunchRegisters * kThreads - kProducerRegisters * 128) / kConsumerThreads / 8 * 8;
  static_assert(kConsumerRegisters <= 240, "setmaxnreg's maximum is 240 at 384 threads");
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using HeadDim = Int<kHeadDim>;

  // dQ = dS K: (queries, head_dim, keys), dS and K both read MN-major; the two consumer
  // warpgroups split the tile by rows (kBlockM 128) or by columns (kBlockM 64).
  static constexpr int kDqWarpgroupsM = kBlockM / 64;
  static constexpr int kDqWarpgroupsN = 2 / kDqWarpgroupsM;
  using TiledMmaDq = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float,
                           Shape<_64, Int<kHeadDim / kDqWarpgroupsN>, BlockN>, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      Layout<Shape<Int<kDqWarpgroupsM>, Int<kDqWarpgroupsN>, _1>>{}));

  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<BlockN, HeadDim>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<BlockM, HeadDim, Int<kStages>>{}));
  // Q and dO as the (head_dim x queries) B operand of dK and dV; K as the (head_dim x keys)
  // B operand of dQ: the same bytes, coordinates swapped.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{},
      make_ordered_layout(Shape<HeadDim, BlockM, Int<kStages>>{}, Step<_2, _1, _3>{})));
  using SmemLayoutKt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(Shape<HeadDim, BlockN>{}, Step<_2, _1>{})));

  using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;  // (tokens, d, heads, batch)
  using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                          GmemShape{}, GmemStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}),
                                      Shape<BlockM, HeadDim>{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutKV{},
                                       Shape<BlockN, HeadDim>{}, _1{}));
  static constexpr uint32_t kTmaBytesKV = kBlockN * kHeadDim * sizeof(Element);
  // A stage: Q, dO, and kBlockM floats each of lse and D.
  static constexpr uint32_t kTmaBytesStage =
      2 * kBlockM * kHeadDim * sizeof(Element) + 2 * kBlockM * sizeof(float);

  // dQ's float32 tile in shared memory and in the sums (flash_bwd_sm90_rows.h): consumer
  // warpgroup w computes and stores part w, ((64 rows, kDqWarpgroupsM), (part_cols,
  // kDqWarpgroupsN)).
  static constexpr DqTileLayout kDq{kBlockM, kHeadDim};
  static_assert(kDq.parts_n() == kDqWarpgroupsN);
  using SmemLayoutDq = Layout<
      Shape<Shape<_64, Int<kDqWarpgroupsM>>, Shape<Int<kDq.part_cols()>, Int<kDqWarpgroupsN>>>,
      Stride<Stride<Int<kDq.part_row()>, Int<kDqWarpgroupsN * kDq.part_floats()>>,
             Stride<_1, Int<kDq.part_floats()>>>>;
  // The float32 tile in shared memory: two parts, none with kDqAtomic 1 or 2.
  static constexpr int kDqSmemFloats = kDqAtomic != 0 ? 4 : 2 * kDq.part_floats();
  // Named barriers (ids above CUTLASS's reserved ones): warpgroup w's dQ part full (it
  // arrives, the writer waits) and empty (the writer arrives, it waits), counted over the
  // warpgroup and the writer warp. With kDqAtomic 1 or 2 and deterministic=True instead:
  // warpgroup w's turn come (over the warpgroup; ids 2, 3) and both parts added (over the
  // consumers; 4).
  // (hopper/named_barriers.h; a kernel's own per-step barriers are bwd_barrier::kStepFirst and
  // kStepSecond.)
  static constexpr int kBarrierDqFull = hopper::bwd_barrier::kDqFull;  // + consumer warpgroup
  static constexpr int kBarrierDqEmpty = hopper::bwd_barrier::kDqEmpty;
  static constexpr int kDqBarrierThreads = 128 + 32;
  static constexpr int kBarrierDqTurn = hopper::bwd_barrier::kDqTurn;
  static constexpr int kBarrierDqAdded = hopper::bwd_barrier::kDqAdded;

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;
};

// The CTA's shared-memory tiles as the tensors the consumer warpgroups' products read: K, V,
// K^T, Q, dO, Q^T, dO^T (the transposed views: the same bytes, coordinates swapped), dS and
// dS^T, in the layouts of the kernel's traits.
template <class Traits>
__device__ __forceinline__ auto consumer_smem_tiles(typename Traits::SharedStorage& smem) {
  auto tile = [](auto* data, auto layout) { return make_tensor(make_smem_ptr(data), layout); };
  return make_tuple(tile(smem.k.data(), typename Traits::SmemLayoutKV{}),
                    tile(smem.v.data(), typename Traits::SmemLayoutKV{}),
                    tile(smem.k.data(), typename Traits::SmemLayoutKt{}),
                    tile(smem.q.data(), typename Traits::SmemLayoutQ{}),
                    tile(smem.dout.data(), typename Traits::SmemLayoutQ{}),
                    tile(smem.q.data(), typename Traits::SmemLayoutQt{}),
                    tile(smem.dout.data(), typename Traits::SmemLayoutQt{}),
                    tile(smem.ds.data(), typename Traits::SmemLayoutDs{}),
                    tile(smem.ds.data(), typename Traits::SmemLayoutDsT{}));
}

template <class Traits>
struct BwdKernelParams {
  FlashBwdParams g;
  PaddedRows rows;        // where a sequence's lse, D and dQ rows are (flash_bwd_sm90_rows.h)
  const float* lse_log2;  // [heads_q, rows.total]: lse * log2 e; +inf past a sequence
  const float* delta;     // [heads_q, rows.total]: rowsum(dO * O) - dlse; 0 past a sequence
  float* dq_accum;        // [heads_q, rows.total x kDq.row_floats()], by tiles (DqTileLayout),
                          // zeroed by the preprocess
  // deterministic=True: a counter a query tile, [heads_q x rows.total / block_m] (index: the
  // tile's first padded row / block_m), zeroed by the preprocess, that orders the key tiles'
  // additions into the tile; nullptr otherwise.
  int* dq_order;
  typename Traits::TmaQ tma_q, tma_do;
  typename Traits::TmaKV tma_k, tma_v;
  typename Traits::GmemShape shape_q, shape_k;
};

// The keys and query tiles of one CTA; the producer and the consumers derive the same values.
struct KeyTileWork {
  int64_t q0, sq, k0, sk;  // the sequence's first token and length, queries and keys
  int n0, key_rows;        // first key of the tile, keys of the tile in the sequence
  int m_first, m_count;    // query tiles that see the tile
  int steps;               // m_count per query head of the group
  bool valid;
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ KeyTileWork key_tile_work(const FlashFwdParams& p, int n_block, int b) {
  KeyTileWork w{};
  const Sequence seq = sequence(p, b);
  w.q0 = seq.q0;
  w.sq = seq.sq;
  w.k0 = seq.k0;
  w.sk = seq.sk;
  w.n0 = n_block * kBlockN;
  w.valid = w.n0 < w.sk;
  if (!w.valid) return w;
  w.key_rows = int(w.sk - w.n0 < kBlockN ? w.sk - w.n0 : kBlockN);
  // Both ends of a key's query range grow with the key (common/mask.h).
  const Mask mask{w.sq, w.sk, p.window_left, p.window_right};
  const IndexRange queries{mask.queries_of_key(w.n0).first,
                           mask.queries_of_key(w.n0 + w.key_rows - 1).last};
  w.m_first = queries.empty() ? 0 : int(queries.first / kBlockM);
  w.m_count = queries.empty() ? 0 : int(queries.last / kBlockM) + 1 - w.m_first;
  w.steps = w.m_count * p.group;
  return w;
}

// deterministic=True: the turn of the CTA's key tile at query tile m's counter. The key tiles
// add into a query tile last key tile first, and run last first (cta_tile), so a key tile waits
// only for ones that launched before it, and under a causal or windowed mask (query ranges that
// start later for later keys) the key tile ahead of it began at the same query tile one step
// earlier: the waits cost about a step per key tile, not a step per query tile passed (in key
// order, key tile n would wait at its first query tile for key tile 0 to get there).
// The turn is the number of key tiles after this one (same K/V head, same sequence) that add
// into m: they are consecutive and their query ranges grow with them (common/mask.h), so they
// end at the last key tile a query of m sees (Mask::last_key_tile_of_query_tile).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int dq_turn(const FlashFwdParams& p, const KeyTileWork& w, int m) {
  const Mask mask{w.sq, w.sk, p.window_left, p.window_right};
  return int(mask.last_key_tile_of_query_tile(m, kBlockM, kBlockN)) - w.n0 / kBlockN;
}

// The CTA's key tile, K/V head and sequence; the grid is (key tiles, K/V heads, sequences) and
// launches in that order. Within a head the key tiles with the most queries (causal: the first)
// run first, or under deterministic=True the last first (dq_turn). Launching every head of a
// key tile before the key tile before it made deterministic=True 1.06-1.08x as fast at 2k
// tokens without a mask (shorter chains of waiting key tiles) but 0.47-0.53x at 16k causal,
// where every head's longest key tiles then ran last, together (H100).
struct CtaTile {
  int n_block, head_kv, b;
};

template <class Traits>
__device__ __forceinline__ CtaTile cta_tile(const BwdKernelParams<Traits>& kp) {
  const int x = int(blockIdx.x), y = int(blockIdx.y), b = int(blockIdx.z);
  return {kp.dq_order != nullptr ? int(gridDim.x) - 1 - x : x, y, b};
}

// The first padded row of query tile m of query head `head` in the float32 dQ sums.
template <class Traits>
__device__ __forceinline__ int64_t dq_tile_row(const BwdKernelParams<Traits>& kp, int head,
                                               int64_t seq_row0, int m) {
  return int64_t(head) * kp.rows.total + seq_row0 + int64_t(m) * Traits::kDq.block_m;
}

// deterministic=True: hands the turn at a query tile on once this thread's bulk additions into
// it have finished (the caller has waited for them), ordered before the release that the next
// key tile acquires.
__device__ __forceinline__ void pass_turn_after_bulk(int* order) {
  hopper::fence_async_proxy();
  cuda::pass_turn(order);
}

// The dQ writer, one warp of the producer warpgroup: per step and consumer warpgroup, once the
// warpgroup has stored its part of the step's dQ, one lane adds the part into the float32 sums
// with one bulk addition (a part is contiguous in both, DqTileLayout), and the warp hands the
// part's buffer back once it has been read. This takes the dQ additions (kBlockM x head_dim
// floats a step, as many bytes as the step's Q and dO loads) off the consumers, which only
// store their accumulators to shared memory. With deterministic=True the key tiles take turns
// at each query tile (kp.dq_order), last key tile first, so that every run adds in the same
// order: a key tile waits only for later key tiles, which launched earlier (cta_tile),
// so the waits cannot deadlock.
template <class Traits, class StepHead, class StepTile>
__device__ __forceinline__ void write_dq_sums(const BwdKernelParams<Traits>& kp, const float* parts,
                                              const KeyTileWork& w, const StepHead& step_head,
                                              const StepTile& step_tile, int64_t seq_row0) {
  using cutlass::arch::NamedBarrier;
  constexpr DqTileLayout kDq = Traits::kDq;
  const bool leader = threadIdx.x % 32 == 0;
  CUTE_UNROLL
  for (int wg = 0; wg < 2; ++wg)
    NamedBarrier::arrive(Traits::kDqBarrierThreads, Traits::kBarrierDqEmpty + wg);
  for (int s = 0; s < w.steps; ++s) {
    const int64_t tile_row = dq_tile_row(kp, step_head(s), seq_row0, step_tile(s));
    float* tile = kp.dq_accum + tile_row * kDq.row_floats();
    int* order = kp.dq_order != nullptr ? kp.dq_order + tile_row / kDq.block_m : nullptr;
    if (order != nullptr && leader) {
      const int turn = dq_turn<kDq.block_m, Traits::kBlockN>(kp.g.fwd, w, step_tile(s));
      cuda::wait_for_turn(order, turn);
      hopper::fence_async_proxy();  // the bulk additions below come after the wait
    }
    // The named barriers are aligned (the whole warp executes each together): reconverge
    // after every leader-only block.
    __syncwarp();
    CUTE_UNROLL
    for (int wg = 0; wg < 2; ++wg) {
      NamedBarrier::sync(Traits::kDqBarrierThreads, Traits::kBarrierDqFull + wg);
      if (leader) {
        hopper::bulk_reduce_add_f32(tile + wg * kDq.part_floats(), parts + wg * kDq.part_floats(),
                                    kDq.part_floats() * 4);
        tma_store_arrive();
      }
      __syncwarp();
    }
    if (leader) tma_store_wait<1>();  // the first part has been read
    __syncwarp();
    if (s + 1 < w.steps) NamedBarrier::arrive(Traits::kDqBarrierThreads, Traits::kBarrierDqEmpty);
    if (leader) tma_store_wait<0>();
    __syncwarp();
    if (s + 1 < w.steps)
      NamedBarrier::arrive(Traits::kDqBarrierThreads, Traits::kBarrierDqEmpty + 1);
    if (order != nullptr && leader) {
      hopper::bulk_wait_all();  // the additions are in global memory
      pass_turn_after_bulk(order);
    }
    __syncwarp();
  }
  if (leader) hopper::bulk_wait_all();
}

// One mode of a static CuTe layout, flattened into plain arrays and evaluated with integer
// arithmetic (x's coordinates colexicographic in the shape, dotted with the strides): nvcc's
// constant evaluator gives up on 16k evaluations through CuTe's own functions.
struct FlatMode {
  int rank = 0, shape[8] = {}, stride[8] = {};
  constexpr int operator()(int x) const {
    int at = 0;
    for (int k = 0; k < rank; ++k) {
      at += x % shape[k] * stride[k];
      x /= shape[k];
    }
    return at;
  }
};
template <class Shape, class Stride, size_t... I>
constexpr FlatMode flat_mode(std::index_sequence<I...>) {
  static_assert(sizeof...(I) <= 8);
  FlatMode m;
  m.rank = int(sizeof...(I));
  ((m.shape[I] = int(std::remove_cvref_t<decltype(get<I>(Shape{}))>::value),
    m.stride[I] = int(std::remove_cvref_t<decltype(get<I>(Stride{}))>::value)),
   ...);
  return m;
}
template <class Layout>
constexpr FlatMode flat_mode() {
  using Shape = decltype(flatten_to_tuple(Layout{}.shape()));
  using Stride = decltype(flatten_to_tuple(Layout{}.stride()));
  return flat_mode<Shape, Stride>(std::make_index_sequence<tuple_size<Shape>::value>{});
}

// kDqAtomic 2: whether DqTileLayout::fragment_offset, the postprocess's reading of the sums,
// puts value j of consumer thread t (0-255; warpgroup t / 128) where add_dq_part_atomic adds it:
// part t / 128, (j / 4) * 512 + 4 (t % 128) + j % 4 in it. Checked for every thread and value
// of the traits' dQ product against CuTe's accumulator layout (thread, value) -> (row, column)
// (TiledMMA::get_layoutC_TV: r + kBlockM c).
template <class Traits>
constexpr bool dq_fragment_order_matches() {
  constexpr DqTileLayout kDq = Traits::kDq;
  using TV = decltype(typename Traits::TiledMmaDq{}.get_layoutC_TV());
  constexpr int kValues = Traits::kBlockM * Traits::kHeadDim / Traits::kConsumerThreads;
  static_assert(size<0>(TV{}) == Traits::kConsumerThreads && size<1>(TV{}) == kValues);
  constexpr FlatMode thread_at = flat_mode<decltype(layout<0>(TV{}))>();
  constexpr FlatMode value_at = flat_mode<decltype(layout<1>(TV{}))>();
  for (int t = 0; t < Traits::kConsumerThreads; ++t)
    for (int j = 0; j < kValues; ++j) {
      const int at = thread_at(t) + value_at(j), r = at % Traits::kBlockM, c = at / Traits::kBlockM;
      const int added_at = (t / 128) * kDq.part_floats() + (j / 4) * 512 + 4 * (t % 128) + j % 4;
      if (kDq.part(r, c) != t / 128 || kDq.fragment_offset(r, c) != added_at) return false;
    }
  return true;
}

// kDqAtomic 1 or 2: consumer warpgroup wg (0 or 1) adds its part of a step's dQ, its
// accumulator acc_dq as thr_dq partitions the tile, into the float32 sums of query tile m
// (first padded row tile_row) from registers.
//   1: two floats a reduction at the tile's row-order place (SmemLayoutDq): a warp's
//      reduction covers 8 rows x 32 bytes, whole 32-byte sectors.
//   2: four floats a reduction (red.global.add.v4.f32), float4 k of the thread's accumulator
//      (values 4k to 4k + 3) at float 512 k + 4 (thread in the warpgroup) of the part
//      (DqTileLayout::fragment_offset): a warp's reduction covers 512 consecutive bytes.
// Under deterministic=True (kp.dq_order) the two warpgroups first wait for this key tile's
// turn at the query tile (dq_turn) and pass it on once both have added, as the writer warp
// does on the other path; every element then gets its additions in the same order in every
// run under both 1 and 2 (one reduction a key tile an element).
template <class Traits, class ThrMma, class Acc>
__device__ __forceinline__ void add_dq_part_atomic(const BwdKernelParams<Traits>& kp,
                                                   const KeyTileWork& w, const ThrMma& thr_dq,
                                                   const Acc& acc_dq, int64_t tile_row, int m,
                                                   int wg) {
  using cutlass::arch::NamedBarrier;
  constexpr DqTileLayout kDq = Traits::kDq;
  static_assert(Traits::kDqAtomic == 1 || Traits::kDqAtomic == 2);
  int* order = kp.dq_order != nullptr ? kp.dq_order + tile_row / kDq.block_m : nullptr;
  if (order != nullptr) {
    if (threadIdx.x % 128 == 0)
      cuda::wait_for_turn(order, dq_turn<kDq.block_m, Traits::kBlockN>(kp.g.fwd, w, m));
    NamedBarrier::sync(128, Traits::kBarrierDqTurn + wg);
  }
  if constexpr (Traits::kDqAtomic == 2) {
    static_assert(dq_fragment_order_matches<Traits>(),
                  "the fragment order differs from the dQ accumulator's layout");
    static_assert(decltype(size(acc_dq))::value % 4 == 0);
    // The consumer threads are threads 128-383 of the CTA: threadIdx.x % 128 is the thread's
    // index in its warpgroup, as in thr_dq (tid = threadIdx.x - 128, warpgroup tid / 128).
    float* part = kp.dq_accum + tile_row * kDq.row_floats() + wg * kDq.part_floats() +
                  4 * (threadIdx.x % 128);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_dq); i += 4)
      asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(part + 128 * i),
                   "f"(acc_dq(i)), "f"(acc_dq(i + 1)), "f"(acc_dq(i + 2)), "f"(acc_dq(i + 3))
                   : "memory");
  } else {
    Tensor tDqgDq = thr_dq.partition_C(make_tensor(
        make_gmem_ptr(kp.dq_accum + tile_row * kDq.row_floats()), typename Traits::SmemLayoutDq{}));
    CUTE_UNROLL
    for (int i = 0; i < size(acc_dq); i += 2)
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(&tDqgDq(i)), "f"(acc_dq(i)),
                   "f"(acc_dq(i + 1))
                   : "memory");
  }
  if (order != nullptr) {
    NamedBarrier::sync(Traits::kConsumerThreads, Traits::kBarrierDqAdded);
    if (threadIdx.x == 128) {
      __threadfence();
      cuda::pass_turn(order);
    }
  }
}

// The Q/dO pipeline (CUTLASS's PipelineTmaAsync: a "full" barrier counting a stage's bytes, an
// "empty" one each consumer warpgroup arrives on once) and the barrier of the CTA's K and V,
// set up by every thread of the CTA; thread 0 also prefetches the TMA descriptors.
template <class Traits>
__device__ __forceinline__ typename Traits::Pipeline start_pipeline(
    const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& smem, bool producer) {
  using Pipeline = typename Traits::Pipeline;
  typename Pipeline::Params pipe_params;
  pipe_params.role =
      producer ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;
  pipe_params.num_consumers = 2;  // one arrival a consumer warpgroup (see the forward kernel)
  pipe_params.transaction_bytes = Traits::kTmaBytesStage;
  Pipeline pipeline(smem.pipeline, pipe_params, Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&smem.barrier_kv, 1);
    prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(kp.tma_do.get_tma_descriptor());
    prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();
  return pipeline;
}

// The producer warpgroup (all of its threads call this), at Traits::kProducerRegisters: warp 1 is
// the dQ writer (write_dq_sums); thread 0 loads the CTA's K and V once, then per step the Q and dO
// tiles of kBlockM queries into the ring of Traits::kStages, each stage with the log2-unit lse and
// the row deltas of its queries (one bulk copy each from the padded rows the preprocess wrote).
// Step s is query head step_head(s), query tile step_tile(s).
template <class Traits, class StepHead, class StepTile>
__device__ __forceinline__ void run_producer(const BwdKernelParams<Traits>& kp,
                                             typename Traits::SharedStorage& smem,
                                             typename Traits::Pipeline& pipeline,
                                             const KeyTileWork& w, int n_block, int head_kv, int b,
                                             const StepHead& step_head, const StepTile& step_tile,
                                             int64_t seq_row0) {
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  using HeadDim = typename Traits::HeadDim;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = Traits::kBlockM;
  const FlashFwdParams& p = kp.g.fwd;
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQ{});
  cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
  if (w.steps == 0) return;
  if (threadIdx.x / 32 == 1) {
    if constexpr (Traits::kDqAtomic == 0)
      write_dq_sums<Traits>(kp, smem.dq, w, step_head, step_tile, seq_row0);
    return;
  }
  if (threadIdx.x != 0) return;
  // A variable-length sequence is a window of the one (total tokens) batch.
  const int tb = p.cu_seqlens_q != nullptr ? 0 : b;
  Tensor mK =
      domain_offset(make_coord(w.k0, _0{}), kp.tma_k.get_tma_tensor(kp.shape_k)(_, _, head_kv, tb));
  Tensor mV =
      domain_offset(make_coord(w.k0, _0{}), kp.tma_v.get_tma_tensor(kp.shape_k)(_, _, head_kv, tb));
  Tensor gK = local_tile(mK, Shape<BlockN, HeadDim>{}, make_coord(n_block, _0{}));
  Tensor gV = local_tile(mV, Shape<BlockN, HeadDim>{}, make_coord(n_block, _0{}));
  auto [tKgK, tKsK] =
      tma_partition(kp.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVgV, tVsV] =
      tma_partition(kp.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
  Barrier::arrive_and_expect_tx(&smem.barrier_kv, 2 * Traits::kTmaBytesKV);
  copy(kp.tma_k.with(smem.barrier_kv), tKgK, tKsK);
  copy(kp.tma_v.with(smem.barrier_kv), tVgV, tVsV);

  PipelineState state = cutlass::make_producer_start_state<Pipeline>();
  for (int s = 0; s < w.steps; ++s) {
    const int h = step_head(s), m = step_tile(s);
    Tensor mQ =
        domain_offset(make_coord(w.q0, _0{}), kp.tma_q.get_tma_tensor(kp.shape_q)(_, _, h, tb));
    Tensor mdO =
        domain_offset(make_coord(w.q0, _0{}), kp.tma_do.get_tma_tensor(kp.shape_q)(_, _, h, tb));
    Tensor gQ = local_tile(mQ, Shape<BlockM, HeadDim>{}, make_coord(m, _0{}));
    Tensor gdO = local_tile(mdO, Shape<BlockM, HeadDim>{}, make_coord(m, _0{}));
    auto [tQgQ, tQsQ] =
        tma_partition(kp.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    auto [tdOgdO, tdOsdO] = tma_partition(kp.tma_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO),
                                          group_modes<0, 2>(gdO));
    pipeline.producer_acquire(state);
    uint64_t* full = pipeline.producer_get_barrier(state);
    const int stage = state.index();
    copy(kp.tma_q.with(*full), tQgQ, tQsQ(_, stage));
    copy(kp.tma_do.with(*full), tdOgdO, tdOsdO(_, stage));
    const int64_t row = int64_t(h) * kp.rows.total + seq_row0 + int64_t(m) * kBlockM;
    SM90_BULK_COPY_G2S::copy(kp.lse_log2 + row, full, smem.lse[stage], kBlockM * 4);
    SM90_BULK_COPY_G2S::copy(kp.delta + row, full, smem.delta[stage], kBlockM * 4);
    ++state;
  }
}

}  // namespace tilegrid::attention::sm90_bwd
