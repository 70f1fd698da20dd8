#pragma once
// One key tile of the portable forward's loop (internal), shared by the forward
// (flash_fwd_kernel.cuh) and the KV-cache decode kernel (flash_decode_kernel.cuh): a warp's 16
// query rows, each thread holding two of them (rows g and g + 8 of the m16n8 C fragment) and
// their output rows. acc_s is the tile's S = Q K^T ((4, 1, N / 8) floats), acc_o the rows' O
// ((4, 1, D / 8)); row_max holds each row's running maximum of the scores (unscaled; scaled by
// scale_log2 to log2 units), row_sum this thread's share of its running sum.
#include <cute/tensor.hpp>

#include <cmath>

#include "attention/common/mask.h"
#include "attention/common/softmax_base.cuh"
#include "attention/cuda/flash_mma_util.cuh"

namespace tilegrid::attention::flash {

using namespace cute;

// acc_s += Q K^T for the tile, one k16 slice at a time: Q and K read from shared memory by
// their ldmatrix copies (tSsQ / tSsK: the copies' partitions of the tiles; tSrQ / tSrK: the
// fragments, *_view their copy views).
template <class TiledMma, class AccS, class CopyQ, class SrcQ, class FragQ, class FragQView,
          class CopyK, class SrcK, class FragK, class FragKView>
__device__ __forceinline__ void accumulate_qk(const TiledMma& mma, AccS& acc_s, const CopyQ& s2r_q,
                                              const SrcQ& tSsQ, FragQ& tSrQ, FragQView& tSrQ_view,
                                              const CopyK& s2r_k, const SrcK& tSsK, FragK& tSrK,
                                              FragKView& tSrK_view) {
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tSrQ); ++k) {
    copy(s2r_q, tSsQ(_, _, k), tSrQ_view(_, _, k));
    copy(s2r_k, tSsK(_, _, k), tSrK_view(_, _, k));
    gemm(mma, tSrQ(_, _, k), tSrK(_, _, k), acc_s);
  }
}

// Softcap on the raw scores: tanh(s * scale / softcap); the softcap itself is in scale_log2.
template <class AccS>
__device__ __forceinline__ void softcap_scores(AccS& acc_s, float softcap_scale) {
  CUTE_UNROLL
  for (int i = 0; i < size(acc_s); ++i) acc_s(i) = tanhf(acc_s(i) * softcap_scale);
}

// -inf for the keys outside each row's range; tScS: the tile coordinates of acc_s, col0: the
// tile's first key.
template <class AccS, class CoordS>
__device__ __forceinline__ void mask_scores(AccS& acc_s, const CoordS& tScS, int col0,
                                            const KeyRange (&thread_keys)[2]) {
  CUTE_UNROLL
  for (int i = 0; i < size(acc_s); ++i) {
    const KeyRange& keys = thread_keys[(i % 4) / 2];
    const int col = col0 + get<1>(tScS(i));
    if (col < keys.lo || col >= keys.hi) acc_s(i) = -INFINITY;
  }
}

// The online softmax in log2 units (one FFMA and one exp2 a score): acc_s becomes the tile's
// unnormalised probabilities, acc_o and row_sum are rescaled to the new maxima. A row with no
// visible key so far keeps max = -inf; its exponent base is taken as 0 so that
// exp2(-inf - base) = 0 instead of NaN.
template <class AccS, class AccO>
__device__ __forceinline__ void online_softmax(AccS& acc_s, AccO& acc_o, float (&row_max)[2],
                                               float (&row_sum)[2], float scale_log2) {
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    float tile_max = row_max[r];
    CUTE_UNROLL
    for (int n8 = 0; n8 < size<2>(acc_s); ++n8) {
      tile_max = fmaxf(tile_max, acc_s(2 * r, 0, n8));
      tile_max = fmaxf(tile_max, acc_s(2 * r + 1, 0, n8));
    }
    tile_max = quad_max(tile_max);
    const float base = tile_max == -INFINITY ? 0.f : exp2_base(tile_max, scale_log2);
    const float rescale = rebase_factor(row_max[r], tile_max, scale_log2);
    row_max[r] = tile_max;
    row_sum[r] *= rescale;
    CUTE_UNROLL
    for (int d8 = 0; d8 < size<2>(acc_o); ++d8) {
      acc_o(2 * r, 0, d8) *= rescale;
      acc_o(2 * r + 1, 0, d8) *= rescale;
    }
    // A row whose base is past kExactExponentBase (a huge softmax_scale; softmax_base.cuh)
    // takes the exact exponent: its scores become s - max and its base 0.
    float base_r = base;
    if (needs_exact_exponent(base)) {
      base_r = 0.f;
      CUTE_UNROLL
      for (int n8 = 0; n8 < size<2>(acc_s); ++n8) {
        acc_s(2 * r, 0, n8) -= tile_max;
        acc_s(2 * r + 1, 0, n8) -= tile_max;
      }
    }
    float sum = 0.f;
    CUTE_UNROLL
    for (int n8 = 0; n8 < size<2>(acc_s); ++n8) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        const float e = exp2f(fmaf(acc_s(2 * r + c, 0, n8), scale_log2, -base_r));
        acc_s(2 * r + c, 0, n8) = e;
        sum += e;
      }
    }
    row_sum[r] += sum;
  }
}

// O += P V with P (acc_s) rounded to the input type in registers and fed as the A operand;
// V^T read from shared memory by the ldmatrix.trans copy s2r_v (tOsVt: its partition of the
// stage, tOrVt / tOrVt_view: the B fragment and its copy view).
template <class Element, class TiledMma, class AccS, class AccO, class CopyV, class SrcVt,
          class FragVt, class FragVtView>
__device__ __forceinline__ void accumulate_pv(const TiledMma& mma, const AccS& acc_s, AccO& acc_o,
                                              const CopyV& s2r_v, const SrcVt& tOsVt,
                                              FragVt& tOrVt, FragVtView& tOrVt_view) {
  Tensor rP = make_tensor<Element>(acc_s.layout());
  CUTE_UNROLL
  for (int i = 0; i < size(acc_s); ++i) rP(i) = Element(acc_s(i));
  Tensor tOrP = make_tensor(rP.data(), c_layout_as_a(rP.layout()));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tOrP); ++k) {
    copy(s2r_v, tOsVt(_, _, k), tOrVt_view(_, _, k));
    gemm(mma, tOrP(_, _, k), tOrVt(_, _, k), acc_o);
  }
}

}  // namespace tilegrid::attention::flash
