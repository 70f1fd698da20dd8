#pragma once
// Register fragments of the Hopper attention backward (internal, sm_90a): which scores of a
// thread's fragment are visible, the float32 score fragments converted to 16 bits, and dS^T
// written to shared memory for the dQ product.
// Both mainloops (collective/bwd_mainloop_key_rows.cuh, bwd_mainloop_head_split.cuh) form P (or
// P^T) and dS in float32 accumulators and need them as 16-bit register operands and as a shared
// tile.
#include <cutlass/numeric_conversion.h>
#include <cute/tensor.hpp>

#include <cstdint>

#include "attention/common/mask.h"

namespace tilegrid::attention::sm90_bwd {

// The visible scores of one step in a thread's (keys, queries) accumulator fragment, whose
// value i lies on the thread's key (i / 2) % 2 (the wgmma accumulator layout): the queries each
// of the two keys sees, as offsets from the step's first query clamped to [0, block_m], so
// that a score's test is two 32-bit compares. Testing 64-bit query ranges score by score cost
// about ten instructions a score on masked steps (a causal diagonal, a sequence's last tile)
// and made ptxas keep the predicates in local memory.
struct StepScoreMask {
  int first[2], end[2];
  // Value i of the fragment, of query `query` of the step.
  __device__ __forceinline__ bool visible(int i, int query) const {
    const int r = (i / 2) % 2;
    return query >= first[r] && query < end[r];
  }
};

// The queries that see each of a thread's two keys, [first, end) clamped to [0, seqlen_q]:
// 32-bit (a sequence's queries fit), four registers a thread for the whole kernel.
struct KeyQueryRanges {
  int first[2], end[2];

  __device__ __forceinline__ KeyQueryRanges(const IndexRange (&key_queries)[2], int64_t seqlen_q) {
    auto clamped = [&](int64_t query) {
      return int(query < 0 ? 0 : (query > seqlen_q ? seqlen_q : query));
    };
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      first[r] = clamped(key_queries[r].first);
      end[r] = clamped(key_queries[r].last + 1);
    }
  }
  // The mask of the step whose first query is row0.
  __device__ __forceinline__ StepScoreMask step(int row0, int block_m) const {
    StepScoreMask m;
    auto offset = [&](int query) {
      const int x = query - row0;
      return x < 0 ? 0 : (x > block_m ? block_m : x);
    };
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      m.first[r] = offset(first[r]);
      m.end[r] = offset(end[r]);
    }
    return m;
  }
};

// Sets values i and i + 1 (i even) of a 16-bit register fragment with a compact layout (an
// accumulator's) from two floats in one conversion (one F2FP.PACK_AB). Converting value by
// value made ptxas pack the pairs in another order and spend a PRMT a pair regrouping them.
template <class Fragment>
__device__ __forceinline__ void set_pair(Fragment& fragment, int i, float first, float second) {
  using Element = typename Fragment::value_type;
  cutlass::NumericArrayConverter<Element, float, 2> convert;
  cutlass::Array<float, 2> pair;
  pair[0] = first;
  pair[1] = second;
  *reinterpret_cast<cutlass::Array<Element, 2>*>(fragment.data() + i) = convert(pair);
}

// A per-query statistic (lse or D) of the queries in a thread's (keys, queries) accumulator
// fragment, in registers: value i of the fragment (the wgmma layout: pairs of neighbouring
// queries, two keys, then the next column block of 8 queries) holds the query of slot
// (i / 4) * 2 + i % 2.
template <int kQueries>
struct QueryStats {
  float value[kQueries];

  __device__ __forceinline__ static constexpr int slot(int i) { return (i / 4) * 2 + i % 2; }
  // Reads row_stats[query] for each slot's query; identity(i) is value i's (key, query).
  template <class Identity>
  __device__ __forceinline__ void load(const float* row_stats, const Identity& identity) {
    CUTE_UNROLL
    for (int q = 0; q < kQueries; ++q)
      value[q] = row_stats[cute::get<1>(identity((q / 2) * 4 + q % 2))];
  }
  __device__ __forceinline__ float of_value(int i) const { return value[slot(i)]; }
};

// P^T and dS^T = P^T (dP^T - D) as 16-bit register fragments from P^T in float32 (in `p`) and
// dP^T; delta_of(i) is value i's row delta.
template <class Fragment16, class Accumulator, class DeltaOf>
__device__ __forceinline__ void write_p_ds(Fragment16& rP, Fragment16& rdS, const Accumulator& p,
                                           const Accumulator& dp, DeltaOf&& delta_of) {
  CUTE_UNROLL
  for (int i = 0; i < cute::size(p); i += 2) {
    set_pair(rP, i, p(i), p(i + 1));
    set_pair(rdS, i, p(i) * (dp(i) - delta_of(i)), p(i + 1) * (dp(i + 1) - delta_of(i + 1)));
  }
}

// Writes a thread's (keys, queries) fragment of a product's accumulator into a shared tile
// whose queries are contiguous, with stmatrix (four 8 x 8 matrices an instruction). The
// swizzle is applied to compile-time offsets from a 1024-byte-aligned base
// (as_position_independent_swizzle_tensor): storing through the tile's swizzled pointer
// instead computed the swizzle and a 64-bit generic address at run time for every 32-bit
// store (about 150 instructions a step at head dim 128).
template <class Element, class TiledMma>
struct ScoreTileStore {
  using Copy = decltype(cute::make_tiled_copy_C(cute::Copy_Atom<cute::SM90_U32x4_STSM_N, Element>{},
                                                TiledMma{}));

  // The thread's slice of `tile` (keys, queries[, buffers]), for every buffer.
  template <class SmemTensor>
  __device__ __forceinline__ static auto partition(int thread, SmemTensor&& tile) {
    return Copy{}.get_thread_slice(thread).partition_D(
        cute::as_position_independent_swizzle_tensor(tile));
  }
  template <class Fragment, class Destination>
  __device__ __forceinline__ static void store(int thread, const Fragment& values,
                                               Destination&& destination) {
    auto thread_copy = Copy{}.get_thread_slice(thread);
    cute::copy(Copy{}, thread_copy.retile_S(values), destination);
  }
};

}  // namespace tilegrid::attention::sm90_bwd
