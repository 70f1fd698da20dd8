#pragma once
// The attention forward's tiles (internal, sm_90a): what one (query tile, head, sequence)
// covers (TileWork), and the order in which a CTA's tile positions map to them (TileSchedule).
// The producer and the consumers derive the same values.
#include "attention/common/flash_fwd_params.h"
#include "attention/common/mask.h"
#include "attention/common/sequence.h"
#include "hopper/tile_scheduler.cuh"

namespace tilegrid::attention::sm90 {

// One (query tile, head, sequence) of the grid and the key tiles it needs.
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
  const Sequence seq = sequence(p, batch);  // tokens counted in 32 bits here
  w.q_token0 = int(seq.q0);
  w.k_token0 = int(seq.k0);
  w.seqlen_q = int(seq.sq);
  w.seqlen_k = int(seq.sk);
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
// the longest (causal) query tiles first. Persistent: positions blockIdx.x, + gridDim.x, ...
// (or taken dynamically, hopper::TileScheduler) of an order that keeps the K/V being read in
// L2: the (head, sequence) pairs, numbered batch * heads + head, are cut into sections of
// `section` pairs whose K and V fit in L2 together; a section's tiles run before the next
// section's, longest query tiles first within it. (With the longest tiles of every pair first
// instead, the CTAs in flight read the K/V of up to 132 pairs at once: 66 MB at head dim 128,
// 1k keys, more than the 60 MB L2, and the kernel was 13% slower than the one-tile grid at
// that size; with sections, even: bench/results/2026-12-01_h200_attention_sm90_persistent*.json.)
// Dynamic tiles pay with a causal mask: the static stride hands the same CTAs the longest
// tile of every round, and persistent CTAs measured 536 against the one-tile grid's 599
// TFLOP/s at head dim 128 16k causal
// (bench/results/2026-12-01_h200_attention_fa3_loop_variants.json); FlashAttention-3's
// persistent causal kernel takes its tiles dynamically. The scheduler
// thread is the producer warpgroup's second warp, so that the loading thread's loop stays
// within the producer's 24 registers.
struct TileSchedule {
  int heads, batches, m_blocks, section;
  hopper::TileScheduler tiles;

  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ TileWork work(const FlashFwdParams& p, int t) const {
    if (!tiles.persistent)
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

}  // namespace tilegrid::attention::sm90
