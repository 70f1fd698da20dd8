#pragma once
// The consumer mainloop of the Hopper flash attention backward at head dimension 256
// (internal, sm_90a), and its traits: run by kernel/flash_bwd_sm90_kernel.cuh, one CTA per (key
// tile of 64, K/V head, sequence), the producer warpgroup (flash_bwd_sm90_producer.cuh) and two
// consumer warpgroups doing the same work on different data: each step's score products split
// by keys and its gradient products by head-dim columns. A step (64 queries), per consumer
// warpgroup w:
//   S = Q K_w^T, dP = dO V_w^T      (64 queries x 32 keys of the warpgroup, K = head_dim),
//                                   wgmma from shared memory, two commit groups
//   P = exp2(S scale - lse)         once S is in, under dP's product (a thread's two query
//                                   rows: two lse and two D a step); masked pairs 0
//   dS = P (dP - D)                 (softcap's derivative folded in)
//   P, dS -> shared memory (16-bit, keys contiguous: the K-major A operand of dQ and the
//            MN-major B operand of dK^T / dV^T are the same bytes)
//   ---------------- barrier: both warpgroups' P and dS written ----------------
//   dV^T_w += dO_w^T P, dK^T_w += Q_w^T dS   (128 head-dim rows of the warpgroup x 64 keys,
//                                   K = queries), from shared memory
//   dQ_w = dS K_w                   (64 queries x 128 head-dim columns, K = keys)
// Both warpgroups do half of each of the step's five 64 x 64 x 256 products and half of its
// exponentials, at the same time: nothing of one waits on the other's pointwise work. (Giving
// S^T and P^T to one warpgroup and dP^T and dS^T to the other makes the second wait for P^T
// every step: 0.84-0.90x this split's speed on an H100, bf16, 2k and 16k tokens.) dK^T and dV^T (64
// accumulators a thread each) stay in registers over every step and are stored transposed at the
// end. The single P/dS buffer is rewritten at step s + 1 only after both warpgroups passed a
// barrier that each reaches once its products of step s have completed.
// Shared memory (212 KB): K, V (64 x 256 each, 64 KB), one stage of Q and dO (64 KB), P and dS
// (8 KB each), the float32 dQ tile (68 KB; none with kDqAtomic 1 or 2, which leaves room for a
// second stage), lse and D.
// Registers (consumer, 232; kProducerRegisters): dV^T and dK^T 64 each, dQ 64, S and dP 16
// each, P and dS 8 each a thread.
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

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
using hopper::wgmma;

// Both consumer warpgroups half of each step's keys, then half of its head-dim columns (run,
// below).
struct BwdMainloopHeadSplit;

// 64 keys, one stage unless the config says otherwise (two fit once kDqAtomic 1 or 2 frees the
// shared-memory dQ tile).
template <class Element_, int kHeadDim_, class Config = BwdConfig<>>
struct BwdHeadSplitTraits : BwdTraitsBase<Element_, kHeadDim_, 64, Config::stages_or(1), Config> {
  using Base = BwdTraitsBase<Element_, kHeadDim_, 64, Config::stages_or(1), Config>;
  using Base::kBlockM, Base::kBlockN, Base::kDq, Base::kDqSmemFloats, Base::kHeadDim, Base::kStages;
  using typename Base::BlockM, typename Base::BlockN, typename Base::Element,
      typename Base::HeadDim, typename Base::Pipeline, typename Base::SmemLayoutKV,
      typename Base::SmemLayoutQ;
  static_assert(kHeadDim == 256 && kBlockM == 64 && kBlockN == 64,
                "head dim 256, 64 queries and 64 keys a step");
  static_assert(Base::kDqWarpgroupsM == 1, "dQ split by columns, a half a warpgroup");
  using Mainloop = BwdMainloopHeadSplit;

  // S = Q K^T, dP = dO V^T: (queries, keys, head_dim), the warpgroups side by side along the
  // keys (32 each).
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockM, Int<kBlockN / 2>, HeadDim>>(),
      Layout<Shape<_1, _2, _1>>{}));
  // dV^T += dO^T P, dK^T += Q^T dS: (head_dim, keys, queries), both operands MN-major (the Q
  // and dO tiles' transposed views, and P^T / dS^T); the warpgroups take alternate blocks of 64
  // head-dim rows.
  using TiledMmaKV = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, BlockN, BlockM>, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));
  // dQ = dS K: (queries, head_dim, keys), dS K-major (keys contiguous), K MN-major; the
  // warpgroups side by side along the head dim as the base's dQ product (the same accumulator
  // layout, so the dQ tile, its writer and the atomic paths are shared).
  using TiledMmaDq = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim / 2>, BlockN>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_1, _2, _1>>{}));
  // P and dS, (queries, keys) with the keys contiguous (64 keys: one 128-byte swizzled row),
  // and their (keys, queries) view as the MN-major B operand of dV^T and dK^T: the same bytes
  // (row q, key k at q * 64 + k before the swizzle, in both).
  using SmemLayoutDs =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<BlockM, BlockN>{}));
  using SmemLayoutDsT =
      decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, Shape<BlockN, BlockM>{}));
  static_assert(cosize_v<SmemLayoutDs> == cosize_v<SmemLayoutDsT>);
  // Both warpgroups' P and dS written (the products may read them), and both done with the
  // last step's (they may be rewritten), over the consumer warpgroups.
  static constexpr int kBarrierPdsWritten = hopper::bwd_barrier::kStepFirst;
  static constexpr int kBarrierPdsFree = hopper::bwd_barrier::kStepSecond;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> dout;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutDs>> p;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutDs>> ds;
    alignas(128) float dq[kDqSmemFloats];
    alignas(16) float lse[kStages][kBlockM];
    alignas(16) float delta[kStages][kBlockM];
    typename Pipeline::SharedStorage pipeline;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType barrier_kv;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

struct BwdMainloopHeadSplit {
  // The consumer warpgroups of the CTA (threads 128..383, their registers raised already)
  // over the steps of KeyTileWork w, then dK and dV of the tile's keys to global memory.
  template <class Traits, class StepHead, class StepTile>
  __device__ __forceinline__ static void run(const BwdKernelParams<Traits>& kp,
                                             typename Traits::SharedStorage& smem,
                                             typename Traits::Pipeline& pipeline,
                                             const KeyTileWork& w, int head_kv, int b,
                                             StepHead step_head, StepTile step_tile,
                                             int64_t seq_row0) {
    using Element = typename Traits::Element;
    using BlockM = typename Traits::BlockM;
    using BlockN = typename Traits::BlockN;
    using HeadDim = typename Traits::HeadDim;
    using PipelineState = typename Traits::PipelineState;
    using Barrier = cutlass::arch::ClusterTransactionBarrier;
    using cutlass::arch::NamedBarrier;
    constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
    const FlashBwdParams& g = kp.g;
    const FlashFwdParams& p = g.fwd;
    const int tid = int(threadIdx.x) - 128;
    const int consumer = __shfl_sync(0xffffffff, tid / 128, 0);
    const bool signals = tid % 128 == 0;
    auto [sK, sV, sKt, sQ, sdO, sQt, sdOt, sdS, sdSt] = consumer_smem_tiles<Traits>(smem);
    Tensor sP = make_tensor(make_smem_ptr(smem.p.data()), typename Traits::SmemLayoutDs{});
    Tensor sPt = make_tensor(make_smem_ptr(smem.p.data()), typename Traits::SmemLayoutDsT{});

    typename Traits::TiledMmaS mma_s;
    typename Traits::TiledMmaKV mma_kv;
    typename Traits::TiledMmaDq mma_dq;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_kv = mma_kv.get_thread_slice(tid);
    auto thr_dq = mma_dq.get_thread_slice(tid);
    Tensor tSrQ = thr_s.partition_fragment_A(sQ);  // (MMA, 1, D/16, stages)
    Tensor tSrdO = thr_s.partition_fragment_A(sdO);
    Tensor tSrK = thr_s.partition_fragment_B(sK);  // (MMA, 1, D/16): this warpgroup's keys
    Tensor tSrV = thr_s.partition_fragment_B(sV);
    Tensor tKVrQt = thr_kv.partition_fragment_A(sQt);  // (MMA, 2, M/16, stages)
    Tensor tKVrdOt = thr_kv.partition_fragment_A(sdOt);
    Tensor tKVrPt = thr_kv.partition_fragment_B(sPt);  // (MMA, 1, M/16)
    Tensor tKVrdSt = thr_kv.partition_fragment_B(sdSt);
    Tensor tDqrdS = thr_dq.partition_fragment_A(sdS);                        // (MMA, 1, N/16)
    Tensor tDqrKt = thr_dq.partition_fragment_B(sKt);                        // (MMA, 1, N/16)
    Tensor acc_dv = partition_fragment_C(mma_kv, Shape<HeadDim, BlockN>{});  // dV^T
    Tensor acc_dk = partition_fragment_C(mma_kv, Shape<HeadDim, BlockN>{});  // dK^T
    clear(acc_dv);
    clear(acc_dk);
    using PdsStore = ScoreTileStore<Element, typename Traits::TiledMmaS>;
    Tensor tPsP = PdsStore::partition(tid, sP);
    Tensor tdSsdS = PdsStore::partition(tid, sdS);
    Tensor tDqsDq =
        thr_dq.partition_C(make_tensor(make_smem_ptr(smem.dq), typename Traits::SmemLayoutDq{}));

    // (query, key) coordinates of this thread's S elements: value i lies on the thread's query
    // row (i / 2) % 2 (the wgmma accumulator layout).
    Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<BlockM, BlockN>{}));
    int thread_rows[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) thread_rows[r] = get<0>(tScS(2 * r));
    const Mask mask{w.sq, w.sk, p.window_left, p.window_right};
    // Every pair of a step is visible when the tile's first key's queries end after the step's
    // last query and its last key's queries start before the step's first one.
    const IndexRange first_key_queries = mask.queries_of_key(w.n0);
    const IndexRange last_key_queries = mask.queries_of_key(w.n0 + kBlockN - 1);
    const flash_bwd::ScoreGradFn score_grad(g);

    if (w.steps > 0) Barrier::wait(&smem.barrier_kv, 0);
    PipelineState read;
    for (int s = 0; s < w.steps; ++s) {
      const int stage = read.index();
      const int m = step_tile(s);
      const int64_t row0 = int64_t(m) * kBlockM;
      Tensor acc_s = partition_fragment_C(mma_s, Shape<BlockM, BlockN>{});
      Tensor acc_dp = partition_fragment_C(mma_s, Shape<BlockM, BlockN>{});
      pipeline.consumer_wait(read);
      wgmma<true>(mma_s, tSrQ(_, _, _, stage), tSrK, acc_s);
      wgmma<true>(mma_s, tSrdO(_, _, _, stage), tSrV, acc_dp);
      // The stage's lse and D of this thread's two queries, while the products run (the producer
      // overwrites them only after the stage's release, below).
      float lse[2], delta[2];
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        lse[r] = smem.lse[stage][thread_rows[r]];
        delta[r] = smem.delta[stage][thread_rows[r]];
      }
      const bool whole = w.key_rows == kBlockN && row0 + kBlockM <= w.sq &&
                         last_key_queries.first <= row0 &&
                         first_key_queries.last >= row0 + kBlockM - 1;
      // Otherwise the keys [first, end) of the tile that each of the thread's queries sees.
      int key_first[2] = {0, 0}, key_end[2] = {kBlockN, kBlockN};
      if (!whole) {
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          const int64_t query = row0 + thread_rows[r];
          const IndexRange keys = query < w.sq ? mask.keys_of_query(query) : IndexRange{};
          auto local = [&](int64_t key) {
            const int64_t x = key - w.n0;
            return int(x < 0 ? 0 : (x > w.key_rows ? w.key_rows : x));
          };
          key_first[r] = local(keys.first);
          key_end[r] = keys.empty() ? 0 : local(keys.last + 1);
        }
      }
      auto visible = [&](int i) {
        const int r = (i / 2) % 2, key = get<1>(tScS(i));
        return whole || (key >= key_first[r] && key < key_end[r]);
      };
      Tensor rP = make_tensor<Element>(acc_s.layout());
      Tensor rdS = make_tensor<Element>(acc_s.layout());
      if (score_grad.cap_scale > 0.f) {
        // softcap: P and its derivative both come from tanh of S, once dP is in; a masked pair's
        // values are formed and then replaced by 0 (no branch a score).
        warpgroup_wait<0>();
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); i += 2) {
          flash_bwd::ScoreGrad sg[2];
          CUTE_UNROLL
          for (int j = 0; j < 2; ++j) {
            const int r = ((i + j) / 2) % 2;
            const flash_bwd::ScoreGrad sgj = score_grad.template grad<Traits::kFastExp2>(
                acc_s(i + j), acc_dp(i + j), lse[r], delta[r]);
            sg[j] = visible(i + j) ? sgj : flash_bwd::ScoreGrad{0.f, 0.f};
          }
          set_pair(rP, i, sg[0].p, sg[1].p);
          set_pair(rdS, i, sg[0].dx, sg[1].dx);
        }
      } else {
        warpgroup_wait<1>();  // S
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i) {
          const float prob =
              score_grad.template uncapped_prob<Traits::kFastExp2>(acc_s(i), lse[(i / 2) % 2]);
          acc_s(i) = visible(i) ? prob : 0.f;
        }
        warpgroup_wait<0>();  // dP
        write_p_ds(rP, rdS, acc_s, acc_dp, [&](int i) { return delta[(i / 2) % 2]; });
      }
      // P and dS into the shared tiles once both warpgroups are done with the last step's (each
      // completed its products of that step before it got here), made visible to the tensor
      // cores (the async proxy) and, at the barrier, to the other warpgroup.
      if (s > 0) NamedBarrier::sync(Traits::kConsumerThreads, Traits::kBarrierPdsFree);
      PdsStore::store(tid, rP, tPsP);
      PdsStore::store(tid, rdS, tdSsdS);
      cutlass::arch::fence_view_async_shared();
      NamedBarrier::sync(Traits::kConsumerThreads, Traits::kBarrierPdsWritten);
      // dV^T += dO^T P, dK^T += Q^T dS (one commit group each), then dQ = dS K.
      wgmma<false>(mma_kv, tKVrdOt(_, _, _, stage), tKVrPt, acc_dv);
      wgmma<false>(mma_kv, tKVrQt(_, _, _, stage), tKVrdSt, acc_dk);
      Tensor acc_dq = partition_fragment_C(mma_dq, Shape<BlockM, HeadDim>{});
      wgmma<true>(mma_dq, tDqrdS, tDqrKt, acc_dq);
      warpgroup_wait<1>();  // dV^T and dK^T: this warpgroup is done with the stage
      warpgroup_fence_operand(acc_dv);
      warpgroup_fence_operand(acc_dk);
      if (signals) pipeline.consumer_release(read);
      ++read;

      // The step's dQ part (before the softmax scale) into the float32 sums: from registers
      // (kDqAtomic 1 or 2), or through the shared-memory tile once the writer warp has read the
      // last step's out, for the writer to add.
      if constexpr (Traits::kDqAtomic != 0) {
        warpgroup_wait<0>();
        add_dq_part_atomic(kp, w, thr_dq, acc_dq, dq_tile_row(kp, step_head(s), seq_row0, m),
                           m, consumer);
      } else {
        NamedBarrier::sync(Traits::kDqBarrierThreads, Traits::kBarrierDqEmpty + consumer);
        warpgroup_wait<0>();
        CUTE_UNROLL
        for (int i = 0; i < size(acc_dq); i += 2)
          *reinterpret_cast<float2*>(&tDqsDq(i)) = make_float2(acc_dq(i), acc_dq(i + 1));
        cutlass::arch::fence_view_async_shared();
        NamedBarrier::arrive(Traits::kDqBarrierThreads, Traits::kBarrierDqFull + consumer);
      }
    }
    // dV and dK times the softmax scale of the tile's keys, from their transposes.
    Tensor tKVc = thr_kv.partition_C(make_identity_tensor(Shape<HeadDim, BlockN>{}));
    flash_bwd::store_key_columns<Element>(g, g.dv, b, w.k0 + w.n0, head_kv, w.key_rows, acc_dv, 1.f,
                                          tKVc);
    flash_bwd::store_key_columns<Element>(g, g.dk, b, w.k0 + w.n0, head_kv, w.key_rows, acc_dk,
                                          g.scale, tKVc);
  }
};

}  // namespace tilegrid::attention::sm90_bwd
