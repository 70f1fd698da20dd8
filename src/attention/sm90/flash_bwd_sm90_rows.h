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

// How the float32 dQ sums of one query tile (block_m rows, head_dim columns) are laid out:
// as the main kernel's two consumer warpgroups compute the tile, in two parts of 64 rows x
// head_dim / n columns (n = 128 / block_m: the tile splits by columns at block_m 64, by rows
// at 128), one part after the other, each part's rows padded by 8 floats. A part is then one
// contiguous run, added by one bulk copy from a shared-memory tile of the same layout, into
// which a warpgroup's float2 accumulator stores (a half-warp: 4 rows x 8 columns, rows 8 banks
// apart) fall on 32 distinct banks. Tiles follow each other in a sequence's padded rows, so
// that a tile occupies block_m x row_floats() floats; the padding floats are never read.
struct DqTileLayout {
  int block_m, head_dim;
  constexpr int parts_n() const { return 128 / block_m; }  // parts along the columns
  constexpr int part_cols() const { return head_dim / parts_n(); }
  constexpr int part_row() const { return part_cols() + 8; }
  constexpr int part_floats() const { return 64 * part_row(); }
  constexpr int row_floats() const { return 2 * part_floats() / block_m; }
  // Where element (r, c) of the tile is, in floats from the tile's start.
  constexpr int offset(int r, int c) const {
    return ((r / 64) * parts_n() + c / part_cols()) * part_floats() + (r % 64) * part_row() +
           c % part_cols();
  }
};
static_assert(DqTileLayout{64, 128}.row_floats() == 144 &&
              DqTileLayout{128, 64}.row_floats() == 72);
static_assert(DqTileLayout{64, 128}.offset(1, 64) == 64 * 72 + 72);

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
