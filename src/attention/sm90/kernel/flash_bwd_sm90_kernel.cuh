#pragma once
// Hopper flash attention backward, the main kernel (internal, sm_90a): one CTA per (key tile,
// K/V head, sequence) and every head dimension. It composes:
//  - the CTA's work: its key tile and K/V head (cta_tile: the tiles with the most queries first,
//    or under deterministic=True the last tile first) and the query tiles and query heads of the
//    GQA group that see it (KeyTileWork), a step per (query head, query tile);
//  - warpgroup 0, the producer (run_producer, flash_bwd_sm90_producer.cuh): one thread loads K
//    and V once, then each step's Q and dO tiles with their lse and row deltas into a
//    kStages-deep TMA pipeline; a second warp adds each step's dQ into the float32 sums;
//  - warpgroups 1 and 2, the consumers, their registers raised (kConsumerRegisters): the
//    traits' Mainloop over the steps, which keeps dK and dV on chip and stores them once at
//    the end: BwdMainloopKeyRows at head dims 64 and 128 (collective/bwd_mainloop_key_rows.cuh,
//    128-key tiles, each warpgroup its 64 keys), BwdMainloopHeadSplit at 256
//    (collective/bwd_mainloop_head_split.cuh, 64-key tiles, the warpgroups splitting a step by
//    keys and then by head-dim columns).
// The preprocess (row deltas, dQ sums cleared) and postprocess (dQ scaled and converted)
// kernels around it: flash_bwd_sm90_rows_kernels.cuh; the launch: flash_bwd_sm90_launch.cuh.
#include <cutlass/arch/reg_reconfig.h>

#include <cstdint>

#include "attention/common/flash_bwd_params.h"
#include "attention/sm90/flash_bwd_sm90_producer.cuh"

namespace tilegrid::attention::sm90_bwd {

// Grid (ceil(max_seqlen_k / kBlockN), heads_kv, batch).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ BwdKernelParams<Traits> kp) {
  const FlashFwdParams& p = kp.g.fwd;
  const CtaTile tile = cta_tile(kp);
  const int n_block = tile.n_block, head_kv = tile.head_kv, b = tile.b;
  const KeyTileWork w = key_tile_work<Traits::kBlockM, Traits::kBlockN>(p, n_block, b);
  // A key tile past its sequence's end has no rows to write; one that no query sees (an empty
  // query sequence included) writes zeros (the mainloop's store).
  if (!w.valid) return;

  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const bool producer = __shfl_sync(0xffffffff, int(threadIdx.x) / 128, 0) == 0;
  typename Traits::Pipeline pipeline = start_pipeline<Traits>(kp, smem, producer);

  // Step s: query head head_kv * group + s / m_count, query tile m_first + s % m_count.
  auto step_head = [&](int s) { return head_kv * p.group + s / w.m_count; };
  auto step_tile = [&](int s) { return w.m_first + s % w.m_count; };
  const int64_t seq_row0 = kp.rows.first_row(p, b);  // the sequence's first padded row

  if (producer) {
    run_producer<Traits>(kp, smem, pipeline, w, n_block, head_kv, b, step_head, step_tile,
                         seq_row0);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
  Traits::Mainloop::run(kp, smem, pipeline, w, head_kv, b, step_head, step_tile, seq_row0);
}

}  // namespace tilegrid::attention::sm90_bwd
