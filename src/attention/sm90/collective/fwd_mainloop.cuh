#pragma once
// The forward's mainloop on one consumer warpgroup (internal, sm_90a): for each key tile of a
// query tile, S = Q K^T with wgmma from shared memory (fp32 accumulators), softcap, mask and
// online softmax (fwd_softmax.cuh), then O += P V with wgmma taking P from registers (the RS
// form) and V from shared memory read MN-major.
// Intra-warpgroup overlap: the Q K^T of tile j+1 is issued before the softmax of tile j runs
// and the P V of tile j right after it, so that the tensor cores work while the exponentials
// of the next tile are computed (FlashAttention-3's two-stage pipeline). With ping-pong the
// consumer warpgroups take turns to issue those two products (hopper::WarpgroupTurns).
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>

#include "attention/common/mask.h"
#include "attention/sm90/collective/fwd_softmax.cuh"
#include "attention/sm90/collective/fwd_tile_work.cuh"
#include "attention/sm90/flash_fwd_sm90_traits.h"
#include "hopper/warpgroup_turns.cuh"
#include "hopper/wgmma.cuh"

namespace tilegrid::attention::sm90 {

template <class Traits>
struct FwdMainloop {
  using Element = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;

  typename Traits::SharedStorage& smem;
  Pipeline& pipeline_k;
  Pipeline& pipeline_v;
  hopper::WarpgroupTurns<Traits::kConsumerWarpgroups> turns;
  // The thread of this consumer warpgroup that frees K/V stages and sQ (see the kernel's
  // num_consumers; in a cluster every thread calls and the pipeline lets the ones it picked
  // arrive).
  bool signals;
  float softcap_scale;
  // The consumers' side of the K/V ring and of the Q barrier, carried from tile to tile.
  PipelineState read{};  // consumer start: stage 0, phase 0
  int q_loads = 0;

  __device__ __forceinline__ void release_stage(Pipeline& pipeline,
                                                const PipelineState& stage) const {
    if (Traits::kClusterM > 1 || signals) pipeline.consumer_release(stage);
  }

  // The key tiles [w.n_min, w.n_max) of tile w (n_count > 0), last first, into acc_o (zero on
  // entry) and `softmax` (reset on entry). tSrQ, tSrK, tOrV: the wgmma operand descriptors of
  // Q, of the K stages and of the V stages read as V^T; tScS: the tile coordinates of this
  // thread's S values.
  template <class MmaS, class MmaO, class FragQ, class FragK, class FragV, class AccO,
            class CoordsS>
  __device__ __forceinline__ void run(MmaS& mma_s, MmaO& mma_o, const FragQ& tSrQ,
                                      const FragK& tSrK, const FragV& tOrV, AccO& acc_o,
                                      const CoordsS& tScS, FwdSoftmax<Traits>& softmax,
                                      const TileWork& w, const KeyRange (&thread_keys)[2]) {
    using namespace cute;
    using hopper::wgmma;
    Tensor acc_s = partition_fragment_C(
        mma_s, Shape<typename Traits::BlockM, typename Traits::BlockN>{});
    // P in the input type, as the A operand of P V: its own registers, which an in-flight
    // P V reads, so the next tile's softmax works on acc_s and converts only afterwards.
    Tensor rP = make_tensor<Element>(acc_s.layout());
    Tensor tOrP = make_tensor(rP.data(), hopper::acc_as_a_operand(rP.layout()));
    auto convert_p = [&] {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) rP(i) = Element(acc_s(i));
    };
    auto scores_to_p = [&](int n, float (&o_scale)[2]) {
      softcap_and_mask<Traits::kBlockN>(acc_s, softcap_scale, tScS, n, w, thread_keys);
      softmax.update(acc_s, o_scale);
    };
    float o_scale[2];
    cutlass::arch::ClusterTransactionBarrier::wait(&smem.barrier_q, q_loads & 1);
    // First tile: S and softmax; its P V is issued together with the next tile's S.
    pipeline_k.consumer_wait(read);
    wgmma<true>(mma_s, tSrQ, tSrK(_, _, _, read.index()), acc_s);
    warpgroup_wait<0>();
    release_stage(pipeline_k, read);
    scores_to_p(w.n_max - 1, o_scale);  // O is still zero: rescaling it changes nothing
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
      turns.take();
      wgmma<true>(mma_s, tSrQ, tSrK(_, _, _, next.index()), acc_s);
      FwdSoftmax<Traits>::rescale_o(acc_o, o_scale);
      pipeline_v.consumer_wait(read);
      warpgroup_fence_operand(rP);
      wgmma<false>(mma_o, tOrP, tOrV(_, _, _, read.index()), acc_o);
      turns.pass();
      warpgroup_wait<1>();  // S(n) is complete
      release_stage(pipeline_k, next);
      scores_to_p(w.n_max - 1 - it, o_scale);
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
    FwdSoftmax<Traits>::rescale_o(acc_o, o_scale);
    pipeline_v.consumer_wait(read);
    warpgroup_fence_operand(rP);
    wgmma<false>(mma_o, tOrP, tOrV(_, _, _, read.index()), acc_o);
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_o);
    release_stage(pipeline_v, read);
    ++read;
    ++q_loads;
  }
};

}  // namespace tilegrid::attention::sm90
