#pragma once
// The forward's producer (internal, sm_90a): one thread of the producer warpgroup issues the
// TMA loads of every tile the CTA runs: the Q tile once, then the K and V tiles, last key tile
// first, into the kStages-deep shared-memory ring that the consumers read (CUTLASS's
// PipelineTmaAsync: a "full" barrier a stage counting TMA transaction bytes, an "empty" one
// counting the consumers' releases).
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>

#include <cstdint>

#include "attention/sm90/collective/fwd_tile_work.cuh"
#include "attention/sm90/flash_fwd_sm90_traits.h"

namespace tilegrid::attention::sm90 {

using namespace cute;

template <class Traits>
__device__ __forceinline__ void load_tiles(const KernelParams<Traits>& kp,
                                           typename Traits::SharedStorage& smem,
                                           const TileSchedule& schedule,
                                           typename Traits::Pipeline& pipeline_k,
                                           typename Traits::Pipeline& pipeline_v) {
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  using HeadDim = typename Traits::HeadDim;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kClusterM = Traits::kClusterM;
  const FlashFwdParams& p = kp.p;
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutV{});
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
  for (int k = 0, t = schedule.tiles.tile(smem, 0); t < schedule.tiles.count;
       t = schedule.tiles.tile(smem, ++k)) {
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
}

}  // namespace tilegrid::attention::sm90
