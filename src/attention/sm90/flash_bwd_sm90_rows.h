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

#include "attention/common/flash_fwd_params.h"
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
  // The part of element (r, c): the consumer warpgroup that computes it.
  constexpr int part(int r, int c) const { return (r / 64) * parts_n() + c / part_cols(); }
  // Where element (r, c) of the tile is, in floats from the tile's start.
  constexpr int offset(int r, int c) const {
    return part(r, c) * part_floats() + (r % 64) * part_row() + c % part_cols();
  }
  // The same under kDqAtomic 2 (flash_bwd_sm90_config.h): a part's 64 x part_cols floats in
  // the order of its warpgroup's wgmma accumulator, value j of thread t (of the warpgroup's
  // 128) at (j / 4) * 512 + 4 t + j % 4 from the part's start, so that float4 j / 4 of the
  // 128 threads is one run of 2 KB (a warp's 512 bytes). The accumulator of a 64 x n product
  // (CuTe's CLayout_64xN) gives thread t = 32 w + 4 g + q (warp w, lane 4 g + q) rows
  // 16 w + g and 16 w + g + 8, columns 8 k + 2 q and 8 k + 2 q + 1 (k < n / 8); its value
  // j = (column & 1) + 2 (the row + 8 one) + 4 k. So float4 k of a thread is
  // {(row, col), (row, col + 1), (row + 8, col), (row + 8, col + 1)}, and a part's last
  // 64 x 8 floats (its rows' padding in offset()) are unused. The kernels check this against
  // CuTe's layout at compile time (dq_fragment_order_matches).
  constexpr int fragment_offset(int r, int c) const {
    const int rr = r % 64, cc = c % part_cols();
    const int thread = 32 * (rr / 16) + 4 * (rr % 8) + (cc % 8) / 2;
    return part(r, c) * part_floats() + (cc / 8) * 512 + 4 * thread + 2 * (rr % 16 / 8) + cc % 2;
  }
};
static_assert(DqTileLayout{64, 128}.row_floats() == 144 &&
              DqTileLayout{128, 64}.row_floats() == 72);
static_assert(DqTileLayout{64, 128}.offset(1, 64) == 64 * 72 + 72);
// Fragment order: thread 5 of warpgroup 1 (warp 0, lane 5: rows 1 and 9, columns 2 and 3 of
// each 8 of part 1) holds (9, 128 + 8 + 3) as its value 7 (float4 1, element 3).
static_assert(DqTileLayout{64, 256}.fragment_offset(9, 128 + 8 + 3) == 64 * 136 + 512 + 4 * 5 + 3);
static_assert(DqTileLayout{128, 64}.fragment_offset(64 + 16, 0) == 64 * 72 + 4 * 32);

// Every element of a tile at a distinct fragment offset, inside its part's 64 x part_cols
// floats (the postprocess's reads cover each element once).
constexpr bool fragment_order_is_one_to_one(DqTileLayout t) {
  constexpr int kMaxFloats = 64 * 256;  // the largest tile's elements
  bool seen[kMaxFloats] = {};
  for (int r = 0; r < t.block_m; ++r)
    for (int c = 0; c < t.head_dim; ++c) {
      const int at = t.fragment_offset(r, c);
      const int part = at / t.part_floats(), in_part = at % t.part_floats();
      if (part != t.part(r, c) || in_part >= 64 * t.part_cols()) return false;
      const int index = part * 64 * t.part_cols() + in_part;
      if (seen[index]) return false;
      seen[index] = true;
    }
  return true;
}
static_assert(fragment_order_is_one_to_one(DqTileLayout{128, 64}));
static_assert(fragment_order_is_one_to_one(DqTileLayout{64, 128}));
static_assert(fragment_order_is_one_to_one(DqTileLayout{64, 256}));

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
