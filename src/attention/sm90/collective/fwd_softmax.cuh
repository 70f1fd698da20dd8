#pragma once
// The forward's scores to probabilities on one consumer warpgroup (internal, sm_90a): softcap
// and mask of an S tile, the online softmax across a query tile's key tiles (in fp32, log2
// units), O's rescaling, and the row sums the epilogue normalises by. A thread holds two rows
// of the warpgroup's 64 (the wgmma accumulator layout, ((2, 2, N/8), 1, 1): value i on row
// half (i / 2) % 2), whose four threads (a quad) share each row.
#include <cute/tensor.hpp>

#include <cmath>

#include "attention/common/mask.h"
#include "attention/common/softmax_base.cuh"
#include "attention/sm90/collective/fwd_tile_work.cuh"
#include "tilegrid/attention/exp2_poly.h"

namespace tilegrid::attention::sm90 {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// 2^x on the special-function unit; ex2.approx(-inf) = +0, which masked scores rely on.
__device__ __forceinline__ float exp2_mufu(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Softcap, then the mask of key tile n: a score whose key this thread's row does not see
// becomes -inf. Only the tiles that hold a masked key of some row of the query tile (the
// sequence's tail, the causal diagonal, a window's edges) test each score.
// tScS: the tile coordinates of this thread's S values.
template <int kBlockN, class AccS, class Coords>
__device__ __forceinline__ void softcap_and_mask(AccS& acc_s, float softcap_scale,
                                                 const Coords& tScS, int n, const TileWork& w,
                                                 const KeyRange (&thread_keys)[2]) {
  using cute::get;
  if (softcap_scale > 0.f) {
    CUTE_UNROLL
    for (int i = 0; i < cute::size(acc_s); ++i) acc_s(i) = tanhf(acc_s(i) * softcap_scale);
  }
  const int col0 = n * kBlockN;
  if (col0 < w.last.lo || col0 + kBlockN > w.first.hi) {
    CUTE_UNROLL
    for (int i = 0; i < cute::size(acc_s); ++i) {
      const KeyRange& keys = thread_keys[(i / 2) % 2];
      const int col = col0 + get<1>(tScS(i));
      if (col < keys.lo || col >= keys.hi) acc_s(i) = -INFINITY;
    }
  }
}

// The online softmax of one query tile's rows on this thread: the row maxima of raw scores
// (the base of the exponentials; with conditional rescaling possibly stale, by at most 8 in
// log2 units) and this thread's partial row sums.
template <class Traits>
struct FwdSoftmax {
  using Element = typename Traits::Element;
  static constexpr float kNegInf = -INFINITY;

  float scale_log2;  // the softmax scale times log2(e)
  float row_max[2];
  float row_sum[2];
  // With conditional rescaling, O is normalised by the sum of the rounded P that P V
  // multiplies (row_sum_p), and the LSE uses the fp32 sum. Reason: with a stale maximum the
  // dominant key's P is 2^x (x <= 8) rather than exactly 1, its bfloat16 rounding no longer
  // cancels between O and the fp32 sum, and outputs were off by up to 0.023 on wide scores;
  // the LSE from the rounded sum was off by up to 0.004 (its tolerance is 2e-4). Without
  // conditional rescaling the one fp32 sum serves both, as in FlashAttention-3.
  float row_sum_p[2];

  __device__ __forceinline__ void reset() {
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      row_max[r] = kNegInf;
      row_sum[r] = 0.f;
      row_sum_p[r] = 0.f;
    }
  }

  // One masked S tile to unnormalised probabilities, in place. Leaves O alone (a P V product
  // may still be reading and writing it) and returns in `o_scale` the factor O's rows need
  // once that product has completed (rescale_o).
  template <class AccS>
  __device__ __forceinline__ void update(AccS& acc_s, float (&o_scale)[2]) {
    using namespace cute;
    // Both rows in one branch-free block, so that the compiler interleaves them: the maxima
    // as four independent chains of N / 16 (a row's two columns a chunk apart), the shuffles
    // of both rows together, the exponentials of both rows in one stream for the
    // special-function unit. (A branch per row serialised all of it: a row's max chain, then
    // its exponentials, then the other row's.)
    constexpr int kChunks = decltype(size<0, 2>(acc_s))::value;  // N / 8
    float tile_max[2][2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      tile_max[r][0] = row_max[r];
      tile_max[r][1] = row_max[r];
    }
    CUTE_UNROLL
    for (int j = 0; j < kChunks; ++j) {
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c)
          tile_max[r][c] = fmaxf(tile_max[r][c], acc_s(make_coord(c, r, j), 0, 0));
      }
    }
    // Whether a row of this warp may take the exact exponent (below), voted on the threads' own
    // maxima so that the vote runs beside the quad's shuffles: a vote on the bases sits between
    // them and the exponentials, four dependent instructions on every tile's path, which cost
    // 4-6% at head dim 64 on an H100. A row's maximum is one of its four threads' values, each
    // already folded with the row's old maximum, and a base that conditional rescaling keeps
    // belongs to a maximum at most 8 in log2 units below them: hence the margin of 16.
    bool maybe_exact = false;
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const float t = fmaxf(tile_max[r][0], tile_max[r][1]);
      maybe_exact |= t != kNegInf && fabsf(t * scale_log2) >= kExactExponentBase - 16.f;
    }
    const bool warp_maybe_exact = __any_sync(0xffffffff, maybe_exact);
    float base[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const float m = quad_max(fmaxf(tile_max[r][0], tile_max[r][1]));
      // Move the base only when it must: always without conditional rescaling (m >= the old
      // max); with it, when the maximum grew by more than 8 in log2 units or the row saw its
      // first key. The factor for O is then 2^(old - new) (0 from -inf, the first key), else
      // exactly 1; a row with no visible key yet keeps max = -inf and base 0, which makes
      // exp2(-inf) = 0 for its masked scores.
      bool move = m > row_max[r];
      if constexpr (Traits::kConditionalRescale)
        move = move && (row_max[r] == kNegInf || (m - row_max[r]) * scale_log2 > 8.f);
      const float new_max = move ? m : row_max[r];
      o_scale[r] = move ? exp2_mufu((row_max[r] - new_max) * scale_log2) : 1.f;
      row_max[r] = new_max;
      row_sum[r] *= o_scale[r];
      if constexpr (Traits::kConditionalRescale) row_sum_p[r] *= o_scale[r];
      base[r] = new_max == kNegInf ? 0.f : exp2_base(new_max, scale_log2);
    }
    // Rows whose base is past kExactExponentBase (a huge softmax_scale; softmax_base.cuh) take
    // the exact exponent: their scores become s - row_max and their base 0, which the loop
    // below then turns into (s - row_max) * scale_log2, as O's rescale forms it. A warp runs
    // that pass only when the vote above says one of its rows may need it (the loop is not
    // doubled); the pass itself decides row by row from the bases.
    if (warp_maybe_exact) {
      float shift[2];
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        const bool exact = needs_exact_exponent(base[r]);
        shift[r] = exact ? row_max[r] : 0.f;  // s - 0 is s, -inf and NaN included
        base[r] = exact ? 0.f : base[r];
      }
      CUTE_UNROLL
      for (int j = 0; j < kChunks; ++j) {
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          acc_s(make_coord(0, r, j), 0, 0) -= shift[r];
          acc_s(make_coord(1, r, j), 0, 0) -= shift[r];
        }
      }
    }
    // Two partial sums a row (the column pairs), each a chain of N / 16 additions.
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    [[maybe_unused]] float sum_p[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // conditional rescaling
    CUTE_UNROLL
    for (int j = 0; j < kChunks; ++j) {
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c) {
          float& s = acc_s(make_coord(c, r, j), 0, 0);
          const float x = fmaf(s, scale_log2, -base[r]);
          if constexpr (Traits::kSoftwareExp2) {
            // One 8-column chunk in four on the FMA pipe: per score the special-function unit
            // needs (1 - f) / 16 of a clock and the FMA pipe (4 + 10 f) / 128 (scale, max, sum,
            // convert; ten for the polynomial), balanced near f = 0.22. exp2_poly clamps at
            // -126, so a masked score (-inf) is made an exact zero here.
            s = (j % 4 == 3) ? (s == kNegInf ? 0.f : exp2_poly(x)) : exp2_mufu(x);
          } else {
            s = exp2_mufu(x);
          }
          sum[r][c] += s;
          if constexpr (Traits::kConditionalRescale) {
            // Rounded here, where the tensor cores still work on P V, rather than after it:
            // summed where P is converted, the same three instructions a score cost about 20%
            // at head dim 128 (bench/results/2026-11-30_h200_attention_sm90_rounded_rowsum.json);
            // the conversion of the rounded value is then exact.
            s = float(Element(s));
            sum_p[r][c] += s;
          }
        }
      }
    }
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      row_sum[r] += sum[r][0] + sum[r][1];
      if constexpr (Traits::kConditionalRescale) row_sum_p[r] += sum_p[r][0] + sum_p[r][1];
    }
  }

  // O's rows to the base of the last update, skipped by a whole warp when none of its 16 rows
  // moved its base (most tiles of a long row). It runs while the tensor cores compute the next
  // S (see the mainloop), but on the issue slots the other warpgroup's softmax needs: always
  // multiplied (as FlashAttention-3 does) it is kHeadDim / 2 multiplications a thread and
  // tile, 128 at head dim 256 for 32 scores; that version ran head dim 256 3-5% further from
  // FlashAttention-3 than before (ratios to FlashAttention-3 in each run:
  // bench/results/2026-12-01_h200_attention_fa3_loop_always_rescale.json against
  // ..._fa3_three_way.json).
  template <class AccO>
  __device__ __forceinline__ static void rescale_o(AccO& acc_o, const float (&o_scale)[2]) {
    using namespace cute;
    if (!__any_sync(0xffffffff, o_scale[0] != 1.f || o_scale[1] != 1.f)) return;
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      CUTE_UNROLL
      for (int j = 0; j < size<0, 2>(acc_o); ++j) {
        acc_o(make_coord(0, r, j), 0, 0) *= o_scale[r];
        acc_o(make_coord(1, r, j), 0, 0) *= o_scale[r];
      }
    }
  }

  // The rows' sums over their quads: `sum` for the LSE and `inv`, the factor that normalises
  // O (0 for a row with no visible key).
  __device__ __forceinline__ void finish(float (&sum)[2], float (&inv)[2]) const {
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      sum[r] = quad_sum(row_sum[r]);
      const float sum_p = Traits::kConditionalRescale ? quad_sum(row_sum_p[r]) : sum[r];
      inv[r] = sum_p == 0.f ? 0.f : 1.f / sum_p;
    }
  }

  // Row r's log-sum-exp (natural log) from its finished sum: -inf for a row with no visible
  // key (sum 0), NaN for a NaN sum (a NaN or +inf score).
  __device__ __forceinline__ float lse(int r, float sum) const {
    return sum == 0.f ? kNegInf : (exp2_base(row_max[r], scale_log2) + log2f(sum)) * float(M_LN2);
  }
};

}  // namespace tilegrid::attention::sm90
