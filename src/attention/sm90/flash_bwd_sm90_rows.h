#pragma once
// Where the Hopper backward keeps its per-row float32 data (internal; host and device): the
// log2-unit lse, the row deltas D and the float32 dQ sums, as [heads_q, total] rows in which
// every sequence has room for its last query tile to run past its end (the main kernel reads
// and adds whole tiles of block_m rows), and every sequence starts on a multiple of 4 rows
// (16 bytes, the alignment of the bulk copies that load lse and D).
//   first_row(b) = round_up(q0(b) + b * (block_m + 4), 4)
// where q0(b) is the sequence's first token in q: the next sequence starts at least
// sq(b) + block_m + 1 rows later, past round_up(sq(b), block_m).
#include <cstdint>

#include "attention/cuda/flash_fwd_params.h"
#include "tilegrid/core/host_device.h"

namespace tilegrid::attention::sm90_bwd {

// Query rows a step of the main kernel: 128 at head dim 64 (so that dQ splits by rows into two
// 64-row halves), 64 at 128 (dK, dV and the two 64 x 64 score tiles fill the consumers'
// registers).
constexpr int block_m(int head_dim) { return head_dim <= 64 ? 128 : 64; }

struct PaddedRows {
  int64_t total = 0;  // rows a head, a multiple of 4
  int block_m = 0;

  static PaddedRows of(const FlashFwdParams& p, int block_m) {
    const int64_t tokens =
        p.cu_seqlens_q != nullptr ? p.rows_q : int64_t(p.batch) * p.seqlen_q;
    return {(tokens + int64_t(p.batch) * (block_m + 4) + 4 + 3) / 4 * 4, block_m};
  }

#if defined(__CUDACC__)
  __device__ __forceinline__ int64_t first_row(const FlashFwdParams& p, int b) const {
    const int64_t q0 = p.cu_seqlens_q != nullptr ? int64_t(p.cu_seqlens_q[b])
                                                 : int64_t(b) * p.seqlen_q;
    return (q0 + int64_t(b) * (block_m + 4) + 3) / 4 * 4;
  }
#endif
};

}  // namespace tilegrid::attention::sm90_bwd
