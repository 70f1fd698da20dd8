#pragma once
// Hopper flash attention backward (sm_90a) for head dimension 256, the main kernel: one CTA
// per (key tile of 64, K/V head, sequence), the producer warpgroup of the narrower kernel
// (flash_bwd_sm90_producer.cuh) and two consumer warpgroups that split the work by gradient,
// not by keys. At head dim 256, dK and dV of 64 keys are 64 x 256 float32 each: 128 registers
// a thread for one of them, so a warpgroup cannot hold both (flash_bwd_sm90_kernel.cuh keeps
// dK and dV of its 64 keys in one warpgroup, which fits up to head dim 128).
//   warpgroup 0                              warpgroup 1
//   S^T = K Q^T (64 keys x 64 queries)       dP^T = V dO^T
//   P^T = exp2(S^T scale - lse), masked;
//   P^T times the softcap's slope into
//   shared memory (float32)             -->  dS^T = (P^T slope) (dP^T - D), into shared
//                                            memory (bf16/fp16) for dQ
//   dV += P^T dO (A from registers)          dK += dS^T Q (A from registers)
//   ---------------- barrier: dS^T written -----------------
//   dQ_step[:, 0:128] = dS K[:, 0:128]       dQ_step[:, 128:256] = dS K[:, 128:256]
// Each warpgroup multiplies 2.5 of the step's five 64 x 64 x 256 products. The dQ parts go
// to the producer's writer warp through the float32 tile in shared memory, as in the narrower
// kernel (DqTileLayout{64, 256}: a part a warpgroup, split by columns).
// Shared memory (221 KB of the 227 a CTA may have): K, V (64 x 256 each, 64 KB), one stage of
// Q and dO (64 KB), P^T's float32 hand-over (16 KB), one dS buffer (8 KB), the float32 dQ
// tile (68 KB), lse and D. One stage: a stage is free once dV and dK have read it, so the next
// step's Q and dO load under the dQ product and the dQ writer, not under the whole step. The
// single P^T and dS buffers are safe: warpgroup 0 writes P^T of step s + 1 only after the dS
// barrier of step s (after warpgroup 1 read P^T of step s), and warpgroup 1 writes dS^T of step
// s + 1 only after P^T of step s + 1 is in, which warpgroup 0 hands over after its dQ product
// of step s (the last reader of dS^T) has completed; warpgroup 1's own dQ product completes
// before it moves on.
// Registers (consumer, 232; kProducerRegisters): dV or dK 128, S^T or dP^T 32, P^T or dS^T as
// the A operand 16, dQ 64 a thread.
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cute/tensor.hpp>

#include <cstdint>

#include "attention/common/flash_bwd_params.h"
#include "attention/common/flash_bwd_score.cuh"
#include "attention/common/flash_bwd_store.cuh"
#include "attention/common/mask.h"
#include "attention/sm90/flash_bwd_sm90_fragments.cuh"
#include "attention/sm90/flash_bwd_sm90_producer.cuh"
#include "attention/sm90/flash_bwd_sm90_rows.h"
#include "hopper/named_barriers.h"
#include "hopper/wgmma.cuh"

namespace tilegrid::attention::sm90_bwd {

using namespace cute;
using hopper::acc_as_a_operand;
using hopper::wgmma;

// 64 keys, one stage unless the config says otherwise (two fit once kDqAtomic 1 or 2 frees the
// shared-memory dQ tile: 217 KB).
template <class Element_, int kHeadDim_, class Config = BwdConfig<>>
struct BwdWideTraits : BwdTraitsBase<Element_, kHeadDim_, 64, Config::stages_or(1), Config> {
  using Base = BwdTraitsBase<Element_, kHeadDim_, 64, Config::stages_or(1), Config>;
  using typename Base::BlockM, typename Base::BlockN, typename Base::Element,
      typename Base::HeadDim, typename Base::Pipeline, typename Base::SmemLayoutKV,
      typename Base::SmemLayoutQ;
  using Base::kBlockM, Base::kBlockN, Base::kDq, Base::kDqSmemFloats, Base::kHeadDim,
      Base::kStages;
  static_assert(kHeadDim == 256 && kBlockM == 64, "head dim 256, 64 queries a step");
  static_assert(Base::kDqWarpgroupsM == 1, "dQ split by columns, a half a warpgroup");

  // S^T (warpgroup 0) and dP^T (warpgroup 1): (keys, queries, head_dim), one warpgroup each.
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockN, BlockM, HeadDim>>(),
      Layout<Shape<_1, _1, _1>>{}));
  // dV += P^T dO (warpgroup 0), dK += dS^T Q (warpgroup 1): (keys, head_dim, queries), A from
  // registers, B MN-major.
  using TiledMmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<BlockN, HeadDim, BlockM>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      Layout<Shape<_1, _1, _1>>{}));
  // dS as dQ's A operand, (queries, keys) with the queries contiguous, and its (keys, queries)
  // view for warpgroup 1's stores (two neighbouring queries of an accumulator pair: one 32-bit
  // store). One buffer (see the file's comment).
  using SmemLayoutDs = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                                              Shape<BlockM, BlockN>{}));
  using SmemLayoutDsT = decltype(composition(
      SmemLayoutDs{}, make_ordered_layout(Shape<BlockN, BlockM>{}, Step<_2, _1>{})));
  // P^T handed over (warpgroup 0 arrives, warpgroup 1 waits) and dS^T written (both), over
  // the consumer warpgroups.
  static constexpr int kBarrierPHandedOver = hopper::bwd_barrier::kStepFirst;
  static constexpr int kBarrierDsWritten = hopper::bwd_barrier::kStepSecond;

  // Accumulator values a consumer thread holds of a 64 x 64 S^T tile.
  static constexpr int kScoreValues = kBlockN * kBlockM / 128;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> dout;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutDs>> ds;
    // P^T times the softcap's slope: value i of consumer thread t at [i][t] (conflict-free).
    alignas(16) float p_slope[kScoreValues][128];
    alignas(128) float dq[kDqSmemFloats];
    alignas(16) float lse[kStages][kBlockM];
    alignas(16) float delta[kStages][kBlockM];
    typename Pipeline::SharedStorage pipeline;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType barrier_kv;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

// Grid (ceil(max_seqlen_k / 64), heads_kv, batch).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_bwd_sm90_wide_kernel(const __grid_constant__ BwdKernelParams<Traits> kp) {
  using Element = typename Traits::Element;
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  using HeadDim = typename Traits::HeadDim;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using cutlass::arch::NamedBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  const FlashBwdParams& g = kp.g;
  const FlashFwdParams& p = g.fwd;
  const int head_kv = blockIdx.y, b = blockIdx.z;
  const int n_block = key_tile_of_cta(kp);
  const KeyTileWork w = key_tile_work<kBlockM, kBlockN>(p, n_block, b);
  // A key tile past its sequence's end has no rows to write; one that no query sees (an empty
  // query sequence included) writes zeros (below).
  if (!w.valid) return;

  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const bool producer = __shfl_sync(0xffffffff, int(threadIdx.x) / 128, 0) == 0;
  Pipeline pipeline = start_pipeline<Traits>(kp, smem, producer);

  auto step_head = [&](int s) { return head_kv * p.group + s / w.m_count; };
  auto step_tile = [&](int s) { return w.m_first + s % w.m_count; };
  const int64_t seq_row0 = kp.rows.first_row(p, b);

  if (producer) {
    run_producer<Traits>(kp, smem, pipeline, w, n_block, head_kv, b, step_head, step_tile,
                         seq_row0);
    return;
  }

  // Consumers: warpgroup 0 forms P^T and accumulates dV, warpgroup 1 forms dS^T and
  // accumulates dK; both multiply half of dQ.
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
  const int tid = int(threadIdx.x) - 128;
  const int role = __shfl_sync(0xffffffff, tid / 128, 0);
  const int wg_tid = tid % 128;
  const bool signals = wg_tid == 0;
  auto [sK, sV, sKt, sQ, sdO, sQt, sdOt, sdS, sdSt] = consumer_smem_tiles<Traits>(smem);

  typename Traits::TiledMmaS mma_s;
  typename Traits::TiledMmaKV mma_kv;
  typename Traits::TiledMmaDq mma_dq;
  auto thr_s = mma_s.get_thread_slice(wg_tid);
  auto thr_kv = mma_kv.get_thread_slice(wg_tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);
  // The operands by role (the same types, so the products below are one code path for both
  // warpgroups: no product in flight leaves a branch). Role 0: S^T = K Q^T, dV += P^T dO;
  // role 1: dP^T = V dO^T, dK += dS^T Q.
  Tensor tSrA = thr_s.partition_fragment_A(role == 0 ? sK : sV);    // (MMA, 1, D/16)
  Tensor tSrB = thr_s.partition_fragment_B(role == 0 ? sQ : sdO);   // (MMA, 1, D/16, stages)
  Tensor tKVrB = thr_kv.partition_fragment_B(role == 0 ? sdOt : sQt);  // (MMA, 1, M/16, stages)
  Tensor tDqrdS = thr_dq.partition_fragment_A(sdS);  // (MMA, 1, N/16)
  Tensor tDqrKt = thr_dq.partition_fragment_B(sKt);  // (MMA, 1, N/16)
  Tensor acc_kv = partition_fragment_C(mma_kv, Shape<BlockN, HeadDim>{});  // dV or dK
  clear(acc_kv);
  using DsStore = ScoreTileStore<Element, typename Traits::TiledMmaS>;
  Tensor tdSsdS = DsStore::partition(wg_tid, sdSt);  // where warpgroup 1's dS^T goes

  // (key, query) coordinates of this thread's S^T elements: value i is on row half (i / 2) % 2
  // and holds queries 2c, 2c + 1 of a column pair (value i even).
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<BlockN, BlockM>{}));
  const Mask mask{w.sq, w.sk, p.window_left, p.window_right};
  IndexRange thread_queries[2];  // the queries that see each of this thread's two keys
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int key = get<0>(tScS(2 * r));
    thread_queries[r] = key < w.key_rows ? mask.queries_of_key(w.n0 + key) : IndexRange{};
  }
  const KeyQueryRanges key_queries(thread_queries, w.sq);
  const IndexRange first_key_queries = mask.queries_of_key(w.n0);
  const IndexRange last_key_queries = mask.queries_of_key(w.n0 + kBlockN - 1);
  const flash_bwd::ScoreGradFn score_grad(g);
  Tensor tDqsDq = thr_dq.partition_C(
      make_tensor(make_smem_ptr(smem.dq), typename Traits::SmemLayoutDq{}));
  float* p_slope = &smem.p_slope[0][wg_tid];  // value i at p_slope[i * 128]
  static_assert(Traits::kScoreValues == 32);

  if (w.steps > 0) Barrier::wait(&smem.barrier_kv, 0);
  PipelineState read;
  for (int s = 0; s < w.steps; ++s) {
    const int stage = read.index();
    const int m = step_tile(s);
    const int64_t row0 = int64_t(m) * kBlockM;
    Tensor acc = partition_fragment_C(mma_s, Shape<BlockN, BlockM>{});  // S^T or dP^T
    static_assert(decltype(size(acc))::value == Traits::kScoreValues);
    pipeline.consumer_wait(read);
    wgmma<true>(mma_s, tSrA, tSrB(_, _, _, stage), acc);
    const bool whole = w.key_rows == kBlockN && row0 + kBlockM <= w.sq &&
                       last_key_queries.first <= row0 &&
                       first_key_queries.last >= row0 + kBlockM - 1;
    const float* lse = smem.lse[stage];
    const float* delta = smem.delta[stage];
    Tensor rA = make_tensor<Element>(acc.layout());  // P^T or dS^T: the A operand of dV / dK
    warpgroup_wait<0>();
    if (role == 0) {
      // A masked pair's values are formed and then replaced by 0 (no branch a score).
      const StepScoreMask step_mask = key_queries.step(m * kBlockM, kBlockM);
      CUTE_UNROLL
      for (int i = 0; i < size(acc); i += 2) {
        flash_bwd::ScoreGradFn::ProbSlope ps[2];
        CUTE_UNROLL
        for (int j = 0; j < 2; ++j) {
          const int query = get<1>(tScS(i + j));
          const auto formed =
              score_grad.template prob_and_slope<Traits::kFastExp2>(acc(i + j), lse[query]);
          ps[j] = whole || step_mask.visible(i + j, query)
                      ? formed
                      : flash_bwd::ScoreGradFn::ProbSlope{0.f, 0.f};
          p_slope[(i + j) * 128] = ps[j].p_slope;
        }
        set_pair(rA, i, ps[0].p, ps[1].p);
      }
      NamedBarrier::arrive(Traits::kConsumerThreads, Traits::kBarrierPHandedOver);
    } else {
      NamedBarrier::sync(Traits::kConsumerThreads, Traits::kBarrierPHandedOver);
      CUTE_UNROLL
      for (int i = 0; i < size(acc); i += 2)
        set_pair(rA, i, p_slope[i * 128] * (acc(i) - delta[get<1>(tScS(i))]),
                 p_slope[(i + 1) * 128] * (acc(i + 1) - delta[get<1>(tScS(i + 1))]));
      DsStore::store(wg_tid, rA, tdSsdS);
      cutlass::arch::fence_view_async_shared();  // dS^T for the tensor cores (dQ)
    }
    // dV += P^T dO or dK += dS^T Q, A from registers.
    Tensor tKVrA = make_tensor(rA.data(), acc_as_a_operand(rA.layout()));
    warpgroup_fence_operand(rA);
    wgmma<false>(mma_kv, tKVrA, tKVrB(_, _, _, stage), acc_kv);
    NamedBarrier::sync(Traits::kConsumerThreads, Traits::kBarrierDsWritten);
    // dV / dK completes before the dQ product starts: P^T / dS^T's registers (the A operand)
    // are free by then, so the dQ accumulator (64 a thread) does not sit beside them and dV or
    // dK (128): with the two products in flight together ptxas spilled 636 bytes a thread.
    warpgroup_wait<0>();  // this warpgroup is done with the stage
    warpgroup_fence_operand(rA);
    warpgroup_fence_operand(acc_kv);
    if (signals) pipeline.consumer_release(read);
    ++read;
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<BlockM, HeadDim>{});
    wgmma<true>(mma_dq, tDqrdS, tDqrKt, acc_dq);

    // The step's dQ part (before the softmax scale) into the float32 sums: from registers
    // (kDqAtomic 1: float2 in row order; 2: float4 in fragment order), or through the
    // shared-memory tile once the writer warp has read the last step's out, for the writer to
    // add.
    if constexpr (Traits::kDqAtomic != 0) {
      warpgroup_wait<0>();
      add_dq_part_atomic(kp, thr_dq, acc_dq, dq_tile_row(kp, step_head(s), seq_row0, m), m,
                         role);
    } else {
      NamedBarrier::sync(Traits::kDqBarrierThreads, Traits::kBarrierDqEmpty + role);
      warpgroup_wait<0>();
      CUTE_UNROLL
      for (int i = 0; i < size(acc_dq); i += 2)
        *reinterpret_cast<float2*>(&tDqsDq(i)) = make_float2(acc_dq(i), acc_dq(i + 1));
      cutlass::arch::fence_view_async_shared();
      NamedBarrier::arrive(Traits::kDqBarrierThreads, Traits::kBarrierDqFull + role);
    }
  }
  // dV (warpgroup 0) or dK times the softmax scale (warpgroup 1) of the tile's keys.
  Tensor tKVc = thr_kv.partition_C(make_identity_tensor(Shape<BlockN, HeadDim>{}));
  flash_bwd::store_key_rows<Element>(g, role == 0 ? g.dv : g.dk, b, w.k0 + w.n0, head_kv,
                                     w.key_rows, acc_kv, role == 0 ? 1.f : g.scale, tKVc);
}

}  // namespace tilegrid::attention::sm90_bwd
