#pragma once
// The Hopper backward's first and last kernels (internal): one warp a row.
//   preprocess: D = rowsum(dO * O) - dlse and lse in log2 units into the padded rows
//     (flash_bwd_sm90_rows.h); rows past a sequence's end, up to its last query tile's end,
//     get lse = +inf (P = 0) and D = 0; every row's float32 dQ sums (and, deterministic, every
//     query tile's order counter) are zeroed. A row that sees no key has lse = -inf; it is
//     given +inf too, so that no product can make a NaN.
//   postprocess: dQ = scale * the float32 sums (laid out by tiles: DqTileLayout), in the input
//     type; postprocess_fragment_kernel reads the sums of kDqAtomic 2 (fragment order).
#include <cuda_runtime.h>
#include <cutlass/array.h>

#include <cmath>
#include <cstdint>

#include "attention/common/flash_bwd_rows.cuh"
#include "attention/common/flash_bwd_score.cuh"
#include "attention/common/sequence.h"
#include "attention/sm90/flash_bwd_sm90_rows.h"

namespace tilegrid::attention::sm90_bwd {

constexpr int kRowsPerBlock = 8;  // one warp a row, 256 threads

// Grid (ceil(round_up(max_seqlen_q, block_m) / 8), heads_q, batch).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    preprocess_kernel(const FlashBwdParams g, const PaddedRows rows, float* lse_log2,
                      float* delta, float* dq_accum, int* dq_order) {
  const FlashFwdParams& p = g.fwd;
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x % 32;
  const Sequence seq = sequence(p, b);
  const int64_t i = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int64_t padded_len = (seq.sq + rows.block_m - 1) / rows.block_m * rows.block_m;
  if (i >= padded_len) return;
  const int64_t at = int64_t(h) * rows.total + rows.first_row(p, b) + i;
  // The rows' float slices together are the whole of every tile (DqTileLayout), padding too.
  constexpr int kRowFloats = DqTileLayout{block_m(kHeadDim), kHeadDim}.row_floats();
  float* dq = dq_accum + at * kRowFloats;
  for (int c = lane; c < kRowFloats; c += 32) dq[c] = 0.f;
  if (dq_order != nullptr && lane == 0 && i % rows.block_m == 0)
    dq_order[at / rows.block_m] = 0;  // the counter of the query tile that starts at row i
  if (i >= seq.sq) {
    if (lane == 0) {
      lse_log2[at] = INFINITY;
      delta[at] = 0.f;
    }
    return;
  }
  const int64_t token = seq.q0 + i;
  const float sum = flash_bwd::out_dout_rowsum<Element, kHeadDim>(g, b, h, token, lane);
  if (lane == 0) {
    const int64_t lse_at = flash_bwd::lse_index(p, b, h, token);
    const float lse = p.lse[lse_at];
    lse_log2[at] = lse == -INFINITY ? INFINITY : flash_bwd::backward_lse_log2(lse);
    delta[at] = sum - (g.dlse != nullptr ? g.dlse[lse_at] : 0.f);
  }
}

// Grid (ceil(max_seqlen_q / 8), heads_q, batch).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    postprocess_kernel(const FlashBwdParams g, const PaddedRows rows, const float* dq_accum) {
  const FlashFwdParams& p = g.fwd;
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x % 32;
  const Sequence seq = sequence(p, b);
  const int64_t i = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= seq.sq) return;
  constexpr DqTileLayout kTile{block_m(kHeadDim), kHeadDim};
  const int64_t tile_row =
      int64_t(h) * rows.total + rows.first_row(p, b) + i / kTile.block_m * kTile.block_m;
  const float* dq = dq_accum + tile_row * kTile.row_floats();
  const int r = int(i % kTile.block_m);
  auto* out = static_cast<Element*>(g.dq) + b * g.dq_batch_stride +
              (seq.q0 + i) * g.dq_row_stride + h * g.dq_head_stride;
  for (int c = 2 * lane; c < kHeadDim; c += 64) {
    const float2 v = *reinterpret_cast<const float2*>(dq + kTile.offset(r, c));
    cutlass::AlignedArray<Element, 2> pair;
    pair[0] = Element(v.x * g.scale);
    pair[1] = Element(v.y * g.scale);
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(out + c) = pair;
  }
}

// The postprocess of kDqAtomic 2 (flash_bwd_sm90_config.h), whose sums are in fragment order
// (DqTileLayout::fragment_offset): a float4 there holds two columns (c, c + 1) of two rows
// (r, r + 8), r % 16 < 8. Warp i of a sequence takes rows r = i - i % 16 + i % 8 and r + 8,
// and half (i % 16) / 8 of the columns: per lane float4 q = lane, lane + 32, ... of that half,
// columns c = c0 + 8 (q / 4) + 2 (q % 4) (c0 = half x head_dim / 2), so that 4 neighbouring
// lanes read 64 consecutive bytes and a warp's stores of a row are consecutive. Rows r + 8 past the
// sequence's end are in the tile's padding rows: read, not stored. Grid
// (ceil(round_up(max_seqlen_q, 16) / 8), heads_q, batch).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    postprocess_fragment_kernel(const FlashBwdParams g, const PaddedRows rows,
                                const float* dq_accum) {
  const FlashFwdParams& p = g.fwd;
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x % 32;
  const Sequence seq = sequence(p, b);
  const int64_t i = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int64_t r0 = i / 16 * 16 + i % 8;  // the first of the warp's two rows
  if (r0 >= seq.sq) return;
  const bool second_row = r0 + 8 < seq.sq;
  constexpr DqTileLayout kTile{block_m(kHeadDim), kHeadDim};
  static_assert(kTile.block_m % 16 == 0, "rows r and r + 8 in one tile");
  static_assert(kTile.row_floats() % 4 == 0 && kTile.part_floats() % 4 == 0,
                "16-byte aligned float4 (the buffer is, for the bulk copies)");
  const int64_t tile_row =
      int64_t(h) * rows.total + rows.first_row(p, b) + r0 / kTile.block_m * kTile.block_m;
  const float* dq = dq_accum + tile_row * kTile.row_floats();
  const int r = int(r0 % kTile.block_m);
  auto* out = static_cast<Element*>(g.dq) + b * g.dq_batch_stride +
              (seq.q0 + r0) * g.dq_row_stride + h * g.dq_head_stride;
  const int64_t second = 8 * g.dq_row_stride;
  constexpr int kHalfCols = kHeadDim / 2;
  const int c0 = int(i % 16 / 8) * kHalfCols;
#pragma unroll
  for (int q = lane; q < kHalfCols / 2; q += 32) {  // a float4: 2 columns of the 2 rows
    const int c = c0 + 8 * (q / 4) + 2 * (q % 4);
    const float4 v = *reinterpret_cast<const float4*>(dq + kTile.fragment_offset(r, c));
    cutlass::AlignedArray<Element, 2> pair;
    pair[0] = Element(v.x * g.scale);
    pair[1] = Element(v.y * g.scale);
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(out + c) = pair;
    if (second_row) {
      pair[0] = Element(v.z * g.scale);
      pair[1] = Element(v.w * g.scale);
      *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(out + second + c) = pair;
    }
  }
}

}  // namespace tilegrid::attention::sm90_bwd
