#pragma once
// The consumer mainloop of the Hopper flash attention backward at head dims 64 and 128
// (internal, sm_90a), and its traits: run by kernel/flash_bwd_sm90_kernel.cuh, one CTA per (key
// tile of 128, K/V head, sequence), a producer warpgroup (flash_bwd_sm90_producer.cuh) and two
// consumer warpgroups of 64 keys each, keys as the rows of every product (head dim 256:
// bwd_mainloop_head_split.cuh).
//  - The producer lowers its registers (kProducerRegisters: 24 at head dim 64, 40 at 128). One
//    thread issues TMA loads: the CTA's K and V once, then per step the Q and dO tiles of kBlockM
//    queries into a kStages-deep ring (CUTLASS's PipelineTmaAsync: a "full" barrier counting the
//    bytes, an "empty" one the consumer warpgroups arrive on), each stage with the log2-unit lse
//    and the row deltas of its queries (one bulk copy each from the padded rows the preprocess
//    wrote; read from global memory by the consumers instead, their 2 x kBlockM / 8 float2 a thread
//    made ptxas spill 1.5 KB at head dim 64). Its second warp adds each step's dQ into the float32
//    sums from shared memory with bulk (TMA) additions (write_dq_sums).
//  - A step, per consumer warpgroup and its 64 keys (keys as the rows of every product, so
//    that P^T and dS^T leave the accumulators as the register A operand of the next one):
//      S^T = K Q^T, dP^T = V dO^T          wgmma from shared memory, fp32 accumulators, two
//                                          commit groups
//      P^T = exp2(S^T scale - lse)         once S^T is in, under dP^T's product; masked
//                                          pairs 0
//      dS^T = P^T (dP^T - D)               (softcap's derivative folded in), into one of two
//                                          shared-memory buffers (by step parity)
//      dV += P^T dO                        wgmma with A from registers (the RS form), dO
//                                          read MN-major from the tile TMA wrote
//      barrier: both warpgroups' dS^T written (the one barrier a step)
//      dQ_step = dS K                      kBlockM x head_dim, split over the two warpgroups
//                                          (by columns at kBlockM 64, by rows at 128)
//      dK += dS^T Q                        the RS form, issued once dV is done
//      dQ_step into the warpgroup's part of a float32 tile in shared memory, under dK's
//      product; the writer warp adds the part into the float32 dQ sums in global memory.
//    dK and dV stay in registers across every query tile and every query head of the GQA
//    group, and leave the chip once (dK scaled by the softmax scale there): no float32 dK/dV
//    in global memory and no atomics on them. dQ's float32 additions are atomic, so their order
//    (and dQ's last bits) may differ between runs. With kp.dq_order (deterministic=True) the
//    key tiles take turns at each query tile, last key tile first (write_dq_sums, dq_turn).
//  - Query tiles run in the order of the mask's query range of the key tile; launch order
//    puts the key tiles with the most queries (causal: the first) first, or, under
//    deterministic=True, the last key tile first (cta_tile).
// Registers (consumer: 240 at head dim 64, 232 at 128, kProducerRegisters): dK and dV
// 64 x head_dim x 2 / 128 a thread (64 at head dim 64, 128 at 128), S^T and dP^T
// 64 x kBlockM / 128 each, dQ kBlockM x head_dim / 256.
// Shared memory: K, V (128 x d each), kStages of Q and dO (kBlockM x d each), two dS buffers
// (kBlockM x 128), the float32 dQ tile (kBlockM x d and 8 floats a 64-row part's row), lse and
// D: d = 64: 199 KB; d = 128: 198 KB.
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include <cmath>
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

// Each consumer warpgroup its 64 keys of the tile, the keys as the rows of every product
// (run, below).
struct BwdMainloopKeyRows;

// 128 keys (64 a warpgroup), two stages unless the config says otherwise.
template <class Element_, int kHeadDim_, class Config = BwdConfig<>>
struct BwdTraits : BwdTraitsBase<Element_, kHeadDim_, 128, Config::stages_or(2), Config> {
  using Base = BwdTraitsBase<Element_, kHeadDim_, 128, Config::stages_or(2), Config>;
  using Base::kBlockM, Base::kBlockN, Base::kDq, Base::kDqSmemFloats, Base::kHeadDim, Base::kStages;
  using typename Base::BlockM, typename Base::BlockN, typename Base::Element,
      typename Base::HeadDim, typename Base::Pipeline, typename Base::SmemLayoutDq,
      typename Base::SmemLayoutKV, typename Base::SmemLayoutQ;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims 64 and 128");
  using Mainloop = BwdMainloopKeyRows;

  // S^T, dP^T: (keys, queries, head_dim), the warpgroups stacked along the keys.
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, BlockM, HeadDim>>(),
      Layout<Shape<_2, _1, _1>>{}));
  // dV += P^T dO, dK += dS^T Q: (keys, head_dim, queries), A from registers, B MN-major.
  using TiledMmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, HeadDim, BlockM>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));
  static_assert(size<1>(typename TiledMmaS::AtomShape_MNK{}) == kBlockM);
  static_assert(size<1>(typename TiledMmaKV::AtomShape_MNK{}) == kHeadDim);
  // The queries of a thread's S^T fragment (64 keys x kBlockM queries over 128 threads, each
  // query on two of its keys).
  static constexpr int kQueriesPerThread = kBlockM / 4;

  // dS as dQ's A operand, (queries, keys) with the queries contiguous, so that the two
  // neighbouring queries an S^T accumulator pair holds are one 32-bit store; and its
  // (keys, queries) view for those stores.
  // Two buffers, by step parity: a warpgroup writes a step's dS^T while the other may still
  // read the previous step's in its dQ product.
  using SmemLayoutDs =
      decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, Shape<BlockM, BlockN, _2>{}));
  using SmemLayoutDsT = decltype(composition(
      SmemLayoutDs{}, make_ordered_layout(Shape<BlockN, BlockM, _2>{}, Step<_2, _1, _3>{})));
  // dS written, between the consumer warpgroups (the one barrier a step).
  static constexpr int kBarrierDsWritten = hopper::bwd_barrier::kStepFirst;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> dout;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutDs>> ds;
    // The step's dQ (SmemLayoutDq), a part a consumer warpgroup.
    alignas(128) float dq[kDqSmemFloats];
    alignas(16) float lse[kStages][kBlockM];
    alignas(16) float delta[kStages][kBlockM];
    typename Pipeline::SharedStorage pipeline;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType barrier_kv;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

struct BwdMainloopKeyRows {
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
    constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
    const FlashBwdParams& g = kp.g;
    const FlashFwdParams& p = g.fwd;
    auto [sK, sV, sKt, sQ, sdO, sQt, sdOt, sdS, sdSt] = consumer_smem_tiles<Traits>(smem);
    const int tid = int(threadIdx.x) - 128;
    const bool signals = tid % 128 == 0;
    typename Traits::TiledMmaS mma_s;
    typename Traits::TiledMmaKV mma_kv;
    typename Traits::TiledMmaDq mma_dq;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_kv = mma_kv.get_thread_slice(tid);
    auto thr_dq = mma_dq.get_thread_slice(tid);
    Tensor tSrK = thr_s.partition_fragment_A(sK);  // (MMA, 1, D/16)
    Tensor tSrV = thr_s.partition_fragment_A(sV);
    Tensor tSrQ = thr_s.partition_fragment_B(sQ);  // (MMA, 1, D/16, stages)
    Tensor tSrdO = thr_s.partition_fragment_B(sdO);
    Tensor tKVrQt = thr_kv.partition_fragment_B(sQt);  // (MMA, 1, M/16, stages)
    Tensor tKVrdOt = thr_kv.partition_fragment_B(sdOt);
    Tensor tDqrdS = thr_dq.partition_fragment_A(sdS);  // (MMA, 1, N/16, 2)
    Tensor tDqrKt = thr_dq.partition_fragment_B(sKt);  // (MMA, 1, N/16)
    Tensor acc_dk = partition_fragment_C(mma_kv, Shape<BlockN, HeadDim>{});
    Tensor acc_dv = partition_fragment_C(mma_kv, Shape<BlockN, HeadDim>{});
    clear(acc_dk);
    clear(acc_dv);
    using DsStore = ScoreTileStore<Element, typename Traits::TiledMmaS>;
    Tensor tdSsdS = DsStore::partition(tid, sdSt);  // where this thread's dS^T goes, a buffer

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
    // Every pair of a step is visible when the tile's first key's queries end after the step's
    // last query and its last key's queries start before the step's first one.
    const IndexRange first_key_queries = mask.queries_of_key(w.n0);
    const IndexRange last_key_queries = mask.queries_of_key(w.n0 + kBlockN - 1);
    const flash_bwd::ScoreGradFn score_grad(g);
    // Where this thread's dQ elements go: into its warpgroup's part (SmemLayoutDq).
    Tensor tDqsDq =
        thr_dq.partition_C(make_tensor(make_smem_ptr(smem.dq), typename Traits::SmemLayoutDq{}));
    const int consumer = tid / 128;

    if (w.steps > 0) Barrier::wait(&smem.barrier_kv, 0);
    PipelineState read;
    for (int s = 0; s < w.steps; ++s) {
      const int stage = read.index();
      const int m = step_tile(s);
      const int64_t row0 = int64_t(m) * kBlockM;
      Tensor acc_s = partition_fragment_C(mma_s, Shape<BlockN, BlockM>{});
      Tensor acc_dp = partition_fragment_C(mma_s, Shape<BlockN, BlockM>{});
      pipeline.consumer_wait(read);
      // The stage's lse and D: read by plain loads, and overwritten by the producer's bulk copy
      // two steps on only after every consumer thread has passed the dS barrier below (after its
      // last read) and the stage's release. compute-sanitizer's racecheck does not follow that
      // order through the mbarrier to the asynchronous copy and reports these reads as hazards.
      const float* lse = smem.lse[stage];
      const float* delta = smem.delta[stage];
      // kStatsEarly: this thread's queries' lse in registers before the products are issued
      // (a query's slot: QueryStats).
      QueryStats<Traits::kQueriesPerThread> stats;
      if constexpr (Traits::kStatsEarly) stats.load(lse, tScS);
      // Two commit groups, so that P is formed while dP^T's product still runs.
      wgmma<true>(mma_s, tSrK, tSrQ(_, _, _, stage), acc_s);
      wgmma<true>(mma_s, tSrV, tSrdO(_, _, _, stage), acc_dp);

      const bool whole = w.key_rows == kBlockN && row0 + kBlockM <= w.sq &&
                         last_key_queries.first <= row0 &&
                         first_key_queries.last >= row0 + kBlockM - 1;
      // Whether this thread's value i is visible; every one is when the step is whole.
      const StepScoreMask step_mask = key_queries.step(m * kBlockM, kBlockM);
      auto visible = [&](int i) { return whole || step_mask.visible(i, get<1>(tScS(i))); };
      Tensor rP = make_tensor<Element>(acc_s.layout());   // P^T, the A operand of dV
      Tensor rdS = make_tensor<Element>(acc_s.layout());  // dS^T, the A operand of dK
      if (score_grad.cap_scale > 0.f) {
        // softcap: P and its derivative both come from tanh of S, in one pass once dP^T is in;
        // a masked pair's values are formed and then replaced by 0 (no branch a score).
        warpgroup_wait<0>();
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); i += 2) {
          flash_bwd::ScoreGrad sg[2];
          CUTE_UNROLL
          for (int j = 0; j < 2; ++j) {
            const int query = get<1>(tScS(i + j));
            const flash_bwd::ScoreGrad g = score_grad.template grad<Traits::kFastExp2>(
                acc_s(i + j), acc_dp(i + j), lse[query], delta[query]);
            sg[j] = visible(i + j) ? g : flash_bwd::ScoreGrad{0.f, 0.f};
          }
          set_pair(rP, i, sg[0].p, sg[1].p);
          set_pair(rdS, i, sg[0].dx, sg[1].dx);
        }
      } else {
        // P^T in float32, in S^T's registers, while dP^T's product still runs (kSplitExp: the
        // first half of it; the rest once dP^T is in, beside dS^T's arithmetic); the loops have
        // no branches (a masked pair's exp2 is formed and then replaced by 0).
        constexpr int kValues = decltype(size(acc_s))::value;
        constexpr int kEarlyValues = Traits::kSplitExp ? kValues / 2 : kValues;
        auto lse_of = [&](int i) {
          if constexpr (Traits::kStatsEarly)
            return stats.of_value(i);
          else
            return lse[get<1>(tScS(i))];
        };
        auto form_p = [&](int begin, int end) {
          if (whole) {
            CUTE_UNROLL
            for (int i = begin; i < end; ++i)
              acc_s(i) = score_grad.template uncapped_prob<Traits::kFastExp2>(acc_s(i), lse_of(i));
          } else {
            CUTE_UNROLL
            for (int i = begin; i < end; ++i) {
              const float p =
                  score_grad.template uncapped_prob<Traits::kFastExp2>(acc_s(i), lse_of(i));
              acc_s(i) = visible(i) ? p : 0.f;
            }
          }
        };
        warpgroup_wait<1>();
        form_p(0, kEarlyValues);
        // kStatsEarly: D in the registers lse held, while dP^T's product runs.
        if constexpr (Traits::kStatsEarly) {
          if constexpr (Traits::kSplitExp) {
            QueryStats<Traits::kQueriesPerThread> deltas;
            deltas.load(delta, tScS);
            warpgroup_wait<0>();
            form_p(kEarlyValues, kValues);
            write_p_ds(rP, rdS, acc_s, acc_dp, [&](int i) { return deltas.of_value(i); });
          } else {
            stats.load(delta, tScS);
            warpgroup_wait<0>();
            write_p_ds(rP, rdS, acc_s, acc_dp, [&](int i) { return stats.of_value(i); });
          }
        } else {
          warpgroup_wait<0>();
          form_p(kEarlyValues, kValues);
          write_p_ds(rP, rdS, acc_s, acc_dp, [&](int i) { return delta[get<1>(tScS(i))]; });
        }
      }
      // dS^T into this step's buffer (the other warpgroup last read it in its dQ product two
      // steps back, which it completed before the last step's barrier), made visible to the
      // tensor cores (the async proxy) and, at the barrier, to the other warpgroup; dV's product
      // runs meanwhile.
      const int ds_buffer = s % 2;
      DsStore::store(tid, rdS, tdSsdS(_, _, _, ds_buffer));
      cutlass::arch::fence_view_async_shared();
      Tensor tKVrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
      warpgroup_fence_operand(rP);
      wgmma<false>(mma_kv, tKVrP, tKVrdOt(_, _, _, stage), acc_dv);
      cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, Traits::kBarrierDsWritten);
      Tensor acc_dq = partition_fragment_C(mma_dq, Shape<BlockM, HeadDim>{});
      wgmma<true>(mma_dq, tDqrdS(_, _, _, ds_buffer), tDqrKt, acc_dq);
      warpgroup_wait<1>();  // dV
      Tensor tKVrdS = make_tensor(rdS.data(), acc_as_a_operand(rdS.layout()));
      warpgroup_fence_operand(rdS);
      wgmma<false>(mma_kv, tKVrdS, tKVrQt(_, _, _, stage), acc_dk);
      warpgroup_wait<1>();  // dQ

      // The step's dQ (before the softmax scale), under dK's product, into the float32 sums
      // (rows past the sequence land in its padding rows, which nothing reads): from registers
      // (kDqAtomic 1: float2 in row order; 2: float4 in fragment order), or into this
      // warpgroup's part of the shared-memory tile once the writer warp has read the last step's
      // out, for the writer to add.
      if constexpr (Traits::kDqAtomic != 0) {
        add_dq_part_atomic(kp, w, thr_dq, acc_dq, dq_tile_row(kp, step_head(s), seq_row0, m),
                           m, consumer);
      } else {
        cutlass::arch::NamedBarrier::sync(Traits::kDqBarrierThreads,
                                          Traits::kBarrierDqEmpty + consumer);
        CUTE_UNROLL
        for (int i = 0; i < size(acc_dq); i += 2)
          *reinterpret_cast<float2*>(&tDqsDq(i)) = make_float2(acc_dq(i), acc_dq(i + 1));
        cutlass::arch::fence_view_async_shared();
        cutlass::arch::NamedBarrier::arrive(Traits::kDqBarrierThreads,
                                            Traits::kBarrierDqFull + consumer);
      }

      warpgroup_wait<0>();  // dK: the stage, P^T and dS^T are free
      warpgroup_fence_operand(rP);
      warpgroup_fence_operand(rdS);
      warpgroup_fence_operand(acc_dk);
      warpgroup_fence_operand(acc_dv);
      if (signals) pipeline.consumer_release(read);
      ++read;
    }
    // dK (scaled) and dV of the tile's keys in the sequence.
    Tensor tKVc = thr_kv.partition_C(make_identity_tensor(Shape<BlockN, HeadDim>{}));
    flash_bwd::store_dk_dv<Element>(g, b, w.k0 + w.n0, head_kv, w.key_rows, acc_dk, acc_dv, tKVc);
  }
};

}  // namespace tilegrid::attention::sm90_bwd
