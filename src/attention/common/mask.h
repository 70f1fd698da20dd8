#pragma once
// Which keys a query sees, and which queries see a key (internal; CPU and CUDA code): the
// causal / sliding-window mask of FlashAttention, applicable to S (a query's keys) and to S^T
// (a key's queries). The diagonal is aligned bottom-right: query i's diagonal key is
// i + seqlen_k - seqlen_q. A window (left, right) allows keys diagonal - left .. diagonal +
// right, -1 meaning unbounded on that side; causal is right = 0. Ranges are inclusive and empty
// when first > last. Both ends grow with the index, so the queries of a key tile [j0, j1] are
// queries_of_key(j0).first .. queries_of_key(j1).last, and likewise for a query tile's keys.
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::attention {

struct IndexRange {
  int64_t first = 0, last = -1;
  TG_HOST_DEVICE bool empty() const { return first > last; }
  TG_HOST_DEVICE bool contains(int64_t x) const { return first <= x && x <= last; }
};

struct Mask {
  int64_t seqlen_q = 0, seqlen_k = 0;
  int64_t window_left = -1, window_right = -1;

  // Keys of query i, clamped to the sequence.
  TG_HOST_DEVICE IndexRange keys_of_query(int64_t i) const {
    const int64_t diagonal = i + seqlen_k - seqlen_q;
    IndexRange r{0, seqlen_k - 1};
    if (window_left >= 0 && diagonal - window_left > r.first) r.first = diagonal - window_left;
    if (window_right >= 0 && diagonal + window_right < r.last) r.last = diagonal + window_right;
    return r;
  }

  // Queries that see key j, clamped to the sequence (the inverse of keys_of_query).
  TG_HOST_DEVICE IndexRange queries_of_key(int64_t j) const {
    const int64_t offset = seqlen_k - seqlen_q;  // key j is the diagonal of query j - offset
    IndexRange r{0, seqlen_q - 1};
    if (window_right >= 0 && j - offset - window_right > r.first)
      r.first = j - offset - window_right;
    if (window_left >= 0 && j - offset + window_left < r.last) r.last = j - offset + window_left;
    return r;
  }

  TG_HOST_DEVICE bool sees(int64_t i, int64_t j) const { return keys_of_query(i).contains(j); }

  // The last tile of block_n keys that a query of query tile m (block_m queries; its rows past
  // seqlen_q left out) sees: the tile of the last key of the tile's last query, both ends of a
  // query's keys growing with the query; -1 where no query of the tile sees a key.
  TG_HOST_DEVICE int64_t last_key_tile_of_query_tile(int64_t m, int64_t block_m,
                                                     int64_t block_n) const {
    const int64_t end = (m + 1) * block_m < seqlen_q ? (m + 1) * block_m : seqlen_q;
    const IndexRange keys = keys_of_query(end - 1);
    return end <= 0 || keys.empty() ? -1 : keys.last / block_n;
  }
};

// The forward kernels' form of keys_of_query: keys [lo, hi) of query `row`, clamped to
// [0, seqlen_k], in the 32-bit ints their key-tile loops count in. Params: anything with
// int64 window_left / window_right (FlashFwdParams).
struct KeyRange {
  int lo, hi;
};

template <class Params>
TG_HOST_DEVICE KeyRange key_range(const Params& p, int64_t row, int seqlen_q, int seqlen_k) {
  const int64_t diag = row + seqlen_k - seqlen_q;
  int64_t lo = 0, hi = seqlen_k;
  if (p.window_left >= 0) lo = diag - p.window_left;
  if (p.window_right >= 0) hi = diag + p.window_right + 1;
  lo = lo < 0 ? 0 : (lo > seqlen_k ? seqlen_k : lo);
  hi = hi < 0 ? 0 : (hi > seqlen_k ? seqlen_k : hi);
  return {int(lo), int(hi)};
}

}  // namespace tilegrid::attention
