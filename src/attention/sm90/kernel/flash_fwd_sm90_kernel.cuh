#pragma once
// Hopper flash attention forward (internal, sm_90a): one CTA per (query tile, head, sequence),
// a producer warpgroup and two consumer warpgroups of 128 threads (128-row tiles), or three
// (192-row tiles, a head-dimension-64 variant). The kernel composes:
//  - the tiles a CTA runs: TileSchedule (collective/fwd_tile_work.cuh) on hopper::TileScheduler;
//  - warpgroup 0, the producer: it lowers its register budget (setmaxnreg) and one thread issues
//    the TMA loads (load_tiles, collective/fwd_producer.cuh): the Q tile once, then K and V
//    tiles into a kStages-deep shared-memory ring, each stage guarded by a "full" mbarrier (TMA
//    transaction bytes) and an "empty" one (one arrival a consumer warpgroup), CUTLASS's
//    PipelineTmaAsync; with dynamic tiles a second thread is the tile scheduler;
//  - warpgroups 1.., the consumers (64 query rows each): per query tile the key-tile mainloop
//    (FwdMainloop, collective/fwd_mainloop.cuh: Q K^T, softmax, P V with intra-warpgroup
//    overlap), its online softmax (FwdSoftmax, collective/fwd_softmax.cuh) and the epilogue
//    (store_tile, collective/fwd_epilogue.cuh);
//  - the configuration: Sm90Traits and KernelParams (flash_fwd_sm90_traits.h).
// Run-time and tile-shape variants:
//  - Persistent (run-time flag): a grid of one CTA per SM at most, each looping over (query
//    tile, head, sequence) tiles, the longest query tiles first. The producer's K/V ring and
//    the consumers' read position carry over from tile to tile; the next tile's first K is
//    loaded as soon as its stage is free, its Q prefetched into L2 then and loaded once the
//    consumers' last Q K^T of the previous tile has completed (barrier_q_free), while they
//    run its last P V and write its output, so that short sequences do not pay a CTA's
//    prologue and epilogue per tile. Without the flag the same loop runs once, on the tile of
//    the CTA's grid coordinates.
//  - Clusters of two (a tile-shape variant, no mask, fixed lengths, not persistent): two
//    CTAs on neighbouring query tiles of one (head, sequence) read the same K/V tiles; each
//    loads half of every tile and the TMA multicasts it into both, and a stage is free once
//    the consumers of both CTAs have released it.
//  - Ping-pong (run-time flag): the consumer warpgroups take turns to issue their products
//    (hopper::WarpgroupTurns), so that one warpgroup's softmax runs while the tensor cores
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
#include <cutlass/pipeline/pipeline.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>

#include "attention/common/flash_fwd_params.h"
#include "attention/common/mask.h"
#include "attention/sm90/collective/fwd_epilogue.cuh"
#include "attention/sm90/collective/fwd_mainloop.cuh"
#include "attention/sm90/collective/fwd_producer.cuh"
#include "attention/sm90/collective/fwd_softmax.cuh"
#include "attention/sm90/collective/fwd_tile_work.cuh"
#include "attention/sm90/flash_fwd_sm90_traits.h"
#include "hopper/named_barriers.h"
#include "hopper/tile_scheduler.cuh"
#include "hopper/warpgroup_turns.cuh"

namespace tilegrid::attention::sm90 {

using namespace cute;

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ KernelParams<Traits> kp) {
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  using HeadDim = typename Traits::HeadDim;
  using Pipeline = typename Traits::Pipeline;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  const FlashFwdParams& p = kp.p;

  const TileSchedule schedule{
      p.heads_q,
      p.batch,
      kp.m_blocks,
      kp.section,
      {kp.persistent ? kp.m_blocks * p.heads_q * p.batch : 1, kp.persistent,
       kp.persistent ? kp.tile_counter : nullptr}};

  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);

  // Read through a shuffle from lane 0, so that the compiler knows it is the same in a warp
  // and keeps what derives from it (barrier ids, ping-pong's turns) in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffff, int(threadIdx.x) / 128, 0);
  const bool producer = warpgroup == 0;
  typename Pipeline::Params pipe_params;
  pipe_params.role = producer ? Pipeline::ThreadCategory::Producer
                              : Pipeline::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;
  // Arrivals that free a stage: one a consumer warpgroup (FwdMainloop::release_stage), not
  // one a thread. With a cluster of one CTA, CUTLASS's PipelineTmaAsync sets the empty
  // barrier's count to num_consumers and lets every thread that releases arrive;
  // FlashAttention-3 found 256 arrivals a stage a slowdown (its sm90_pipeline_no_cluster.hpp:
  // hdim 128 causal most) and signals from one thread a warpgroup, as CUTLASS did before 3.6.
  // That is enough: a wgmma is one operation of the warpgroup's four warps, so once it has
  // completed for the signalling thread (its warpgroup_wait) it has read its shared-memory
  // operands for all of them. In a cluster of two, every consumer warpgroup frees a stage in
  // both CTAs (each CTA's producer writes into both), and CUTLASS's pipeline picks one thread
  // a warpgroup for each destination CTA itself: there num_consumers is the thread count it
  // expects.
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
    // Dynamic tiles are read by the consumers and the loading thread.
    hopper::init_tile_slots(smem, Traits::kConsumerThreads + 1);
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
    if (threadIdx.x == 32 && schedule.tiles.counter != nullptr)
      return schedule.tiles.schedule_tiles(smem);
    if (threadIdx.x == 0) load_tiles(kp, smem, schedule, pipeline_k, pipeline_v);
    return;
  }

  // Consumers.
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
  const int tid = int(threadIdx.x) - 128;
  const int consumer = warpgroup - 1;
  typename Traits::TiledMmaS mma_s;
  typename Traits::TiledMmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutVt{});
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);   // (MMA, 1, D/16) descriptors
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (MMA, 1, D/16, stages)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (MMA, 1, N/16, stages)
  Tensor acc_o = partition_fragment_C(mma_o, Shape<BlockM, HeadDim>{});

  // Tile coordinates of this thread's S elements: value i sits on row half (i / 2) % 2.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<BlockM, BlockN>{}));
  int thread_row[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) thread_row[r] = get<0>(tScS(2 * r));
  KeyRange thread_keys[2];  // per tile: the keys this thread's two rows see
  FwdSoftmax<Traits> softmax{p.score_scale_log2};

  // Ping-pong: FlashAttention-3's structure: only the steady key-tile steps take turns, a
  // tile's first Q K^T and its last P V are issued outside them, and each warpgroup waits for
  // the K stage before it takes its turn, so that none holds the turn while polling the
  // stage's barrier. (The earlier turns around every product, with every warpgroup waiting
  // inside its turn, ran 2-3% slower than no ping-pong at head dim 128: 604 vs 625 TFLOP/s at
  // 16k full, bench/results/2026-11-30_h200_attention_sm90_variants.json.) The waits are the
  // same for every warpgroup: a wait only warpgroup 0 made was a branch on the thread index
  // between the products, and it cost the kernels without ping-pong too (the stage addresses
  // left the uniform registers; plain head dim 256 16k ran 639 against 663 TFLOP/s,
  // bench/results/2026-12-01_h200_attention_scheduler_variants.json against
  // ..._kv_multicast.json). Every warpgroup takes n_count - 1 turns a tile; the turns run on
  // from tile to tile, so warpgroup 0 need not wait for the last one's epilogue.
  FwdMainloop<Traits> mainloop{smem,
                               pipeline_k,
                               pipeline_v,
                               {kp.ping_pong, consumer, hopper::fwd_barrier::kTurn},
                               tid % 128 == 0,
                               p.softcap_scale};
  mainloop.turns.start();
  for (int k = 0, t = schedule.tiles.tile(smem, 0); t < schedule.tiles.count;
       t = schedule.tiles.tile(smem, ++k)) {
    const TileWork w = schedule.work<kBlockM, kBlockN>(p, t);
    if (!w.valid) continue;  // the tile starts past its sequence's end: no rows to write
    clear(acc_o);
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r)
      thread_keys[r] = key_range(p, int64_t(w.row0) + thread_row[r], w.seqlen_q, w.seqlen_k);
    softmax.reset();
    if (w.n_count > 0)
      mainloop.run(mma_s, mma_o, tSrQ, tSrK, tOrV, acc_o, tScS, softmax, w, thread_keys);
    store_tile(kp, smem, w, consumer, tid, thr_o, acc_o, softmax, thread_row);
  }
  mainloop.turns.finish();
  // The shared memory must outlive the TMA stores that read it.
  if constexpr (Traits::kStoreOByTma) {
    if (tid % 128 == 0) tma_store_wait<0>();
  }
}

}  // namespace tilegrid::attention::sm90
