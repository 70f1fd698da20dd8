#pragma once
// Attention over a KV cache read in place (internal; sm_80 and newer): the decode kernel.
//
// Decoding reads the whole cache for a handful of query rows, so the kernel is built around
// the memory system: one CTA per (16 packed query rows, KV head, sequence, split), the rows
// being the (token, query head) pairs of one KV head (flash_decode_params.h), so each K/V tile
// read from memory serves the whole group. The CTA's four warps each take every fourth key
// tile of the split and run their own two-stage cp.async pipeline and online softmax, so four
// tiles are in flight per CTA without a CTA-wide barrier in the loop; the warps' partial rows
// are merged in shared memory at the end. Each key's row is located on its own (cache row or
// page, then the cell), so pages of any size are read in place.
//
// The arithmetic is the portable forward's (flash_fwd_tile.cuh): S = Q K^T and O += P V on
// mma.sync m16n8k16 with float32 accumulation, softcap and masks on S, the softmax in log2
// units, a row that sees no key written as O = 0, LSE = -inf, and a NaN score reaching O and
// LSE through the sum.
//
// With num_splits > 1 each CTA covers 1 / num_splits of its rows' key tiles and writes its
// rows normalised by their own sums, in float32, with their maxima and sums; the combine kernel
// weighs the splits by their sums moved to the largest maximum's base and writes O and LSE.
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "attention/common/mask.h"
#include "attention/common/softmax_base.cuh"
#include "attention/cuda/flash_decode_params.h"
#include "attention/cuda/flash_fwd_tile.cuh"
#include "attention/cuda/flash_mma_util.cuh"

namespace tilegrid::attention::flash {

using namespace cute;

template <class Element_, int kHeadDim_>
struct DecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kRows = 16;  // query rows of a CTA: one m16 tile
  // Keys a tile: 8 KB of K and of V a stage at head dims 64 and 128, 16 KB at 256.
  static constexpr int kBlockN = kHeadDim <= 64 ? 32 : 16;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStages = 2;

  // One warp's product: 16 rows, the N and K extents of 16 letting one ldmatrix.x4 feed two
  // atoms, as in the portable forward.
  using TiledMma = TiledMMA<MMA_Atom<Mma16816<Element>>, Layout<Shape<_1, _1, _1>>,
                            Tile<_16, _16, _16>>;
  using SmemLayoutQ = SmemTile<kRows, kHeadDim>;
  using SmemLayoutKV = SmemTile<kBlockN, kHeadDim>;
  using SmemLayoutVt = SmemTileTransposed<kBlockN, kHeadDim>;
  static constexpr int kSmemQ = int(cosize(SmemLayoutQ{}));
  static constexpr int kSmemKV = int(cosize(SmemLayoutKV{}));
  static constexpr int kSmemWarp = kStages * 2 * kSmemKV;  // elements: a warp's K and V stages
  static constexpr size_t kSmemBytes = size_t(kSmemQ + kWarps * kSmemWarp) * sizeof(Element);
  // 66, 68 and 136 KB at head dims 64, 128 and 256 (the last beyond the 99 KB of sm_86/sm_89
  // GPUs, where allow_dynamic_smem refuses the launch).

  // The merge of the warps' rows reuses the K/V stages: each warp's un-normalised O rows in
  // float32, a row kMergeRowStride floats apart (4 more than the head dim: a warp's store of
  // one fragment element covers 8 rows, 8-way bank conflicts at a stride of the head dim, 2-way
  // at this one), then each warp's row maxima and sums.
  static constexpr int kMergeRowStride = kHeadDim + 4;
  static constexpr int kMergeFloats = kWarps * kRows * (kMergeRowStride + 2);
  static_assert(kMergeFloats * 4 <= kWarps * kSmemWarp * int(sizeof(Element)),
                "the merge buffer must fit in the K/V stages");
};

// 16 bytes from global to shared memory, asynchronously (sm_80 cp.async, L2 only: the cache is
// read once).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}

// Where sequence `batch`'s key `key` (counted from its leftpad) of KV head `head` lies.
template <class Element>
__device__ __forceinline__ const Element* cache_row(const FlashDecodeParams& p, const void* base,
                                                    int64_t batch_stride, int64_t row_stride,
                                                    int64_t head_stride, int batch, int cache_row_of_batch,
                                                    int leftpad, int key, int head) {
  const int64_t cell = int64_t(leftpad) + key;
  int64_t row, slot;
  if (p.block_table != nullptr) {
    row = p.block_table[int64_t(batch) * p.block_table_stride + cell / p.page_size];
    slot = cell % p.page_size;
  } else {
    row = cache_row_of_batch;
    slot = cell;
  }
  return static_cast<const Element*>(base) + row * batch_stride + slot * row_stride +
         int64_t(head) * head_stride;
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) flash_decode_kernel(const FlashDecodeParams p) {
  using Element = typename Traits::Element;
  constexpr int kRows = Traits::kRows, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kWarps = Traits::kWarps;
  constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
  constexpr float kNegInf = -INFINITY;

  const int row_blocks = int(gridDim.x) / p.num_splits;
  const int split = int(blockIdx.x) / row_blocks, row_block = int(blockIdx.x) % row_blocks;
  const int head_kv = blockIdx.y, batch = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const int leftpad = p.leftpad != nullptr ? p.leftpad[batch] : 0;
  const int seqlen_k = p.seqlen_k[batch] - leftpad;
  const int seqlen_q = p.seqlen_q, group = p.group;
  const int row0 = row_block * kRows;
  const int rows = min(kRows, seqlen_q * group - row0);
  const int cache_row_of_batch = p.cache_batch_idx != nullptr ? p.cache_batch_idx[batch] : batch;

  // Key tiles of the CTA's tokens (both bounds grow with the token), then this split's share.
  const KeyRange first = key_range(p, row0 / group, seqlen_q, seqlen_k);
  const KeyRange last = key_range(p, (row0 + rows - 1) / group, seqlen_q, seqlen_k);
  const int tile_lo = first.lo / kBlockN;
  const int tiles = last.hi > first.lo ? (last.hi + kBlockN - 1) / kBlockN - tile_lo : 0;
  const int per_split = (tiles + p.num_splits - 1) / p.num_splits;
  const int t_begin = tile_lo + split * per_split;
  const int t_end = min(tile_lo + tiles, t_begin + per_split);

  extern __shared__ __align__(128) char smem_raw[];
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  Element* warp_smem = smem + Traits::kSmemQ + warp * Traits::kSmemWarp;
  auto k_stage = [&](int s) { return warp_smem + s * 2 * Traits::kSmemKV; };
  auto v_stage = [&](int s) { return k_stage(s) + Traits::kSmemKV; };
  auto sK = [&](int s) {
    return make_tensor(make_smem_ptr(k_stage(s)), typename Traits::SmemLayoutKV{});
  };
  auto sV = [&](int s) {
    return make_tensor(make_smem_ptr(v_stage(s)), typename Traits::SmemLayoutKV{});
  };
  auto sVt = [&](int s) {
    return make_tensor(make_smem_ptr(v_stage(s)), typename Traits::SmemLayoutVt{});
  };

  // Q: the CTA's rows, zeros past the last.
  for (int c = tid; c < kRows * kChunksPerRow; c += Traits::kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    Element* dst = &sQ(r, col);
    if (r < rows) {
      const int token = (row0 + r) / group, head = head_kv * group + (row0 + r) % group;
      cp_async_16(dst, static_cast<const Element*>(p.q) + int64_t(batch) * p.q_batch_stride +
                           int64_t(token) * p.q_row_stride + int64_t(head) * p.q_head_stride + col);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
  cp_async_fence();

  // One warp's K and V tile: its lanes copy the 16-byte chunks, a key past the sequence as
  // zeros (a V row of garbage would meet P = 0, and 0 x NaN poisons O).
  auto load_kv = [&](int tile, int stage) {
    auto k_dst = sK(stage);
    auto v_dst = sV(stage);
    for (int c = lane; c < kBlockN * kChunksPerRow; c += 32) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const int key = tile * kBlockN + r;
      Element* kd = &k_dst(r, col);
      Element* vd = &v_dst(r, col);
      if (key < seqlen_k) {
        cp_async_16(kd, cache_row<Element>(p, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                                           batch, cache_row_of_batch, leftpad, key, head_kv) + col);
        cp_async_16(vd, cache_row<Element>(p, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                           batch, cache_row_of_batch, leftpad, key, head_kv) + col);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(lane);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);       // (MMA, 1, D / 16)
  Tensor tSrK = thr_mma.partition_fragment_B(sK(0));    // (MMA, N / 8, D / 16)
  Tensor tOrVt = thr_mma.partition_fragment_B(sVt(0));  // (MMA, D / 8, N / 16)
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<kRows>, Int<kHeadDim>>{});
  clear(acc_o);
  auto s2r_q = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma);
  auto s2r_q_thr = s2r_q.get_thread_slice(lane);
  Tensor tSsQ = s2r_q_thr.partition_S(sQ);
  Tensor tSrQ_view = s2r_q_thr.retile_D(tSrQ);
  auto s2r_k = make_tiled_copy_B(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma);
  auto s2r_k_thr = s2r_k.get_thread_slice(lane);
  Tensor tSrK_view = s2r_k_thr.retile_D(tSrK);
  auto s2r_v = make_tiled_copy_B(Copy_Atom<SM75_U16x8_LDSM_T, Element>{}, mma);
  auto s2r_v_thr = s2r_v.get_thread_slice(lane);
  Tensor tOrVt_view = s2r_v_thr.retile_D(tOrVt);

  // This thread's two rows (g and g + 8 of the 16) and their keys.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kBlockN>>{}));
  int thread_row[2];
  KeyRange thread_keys[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    thread_row[r] = get<0>(tScS(2 * r, 0, 0));
    const int token = min(row0 + thread_row[r], row0 + rows - 1) / group;
    thread_keys[r] = key_range(p, token, seqlen_q, seqlen_k);
  }

  float row_max[2] = {kNegInf, kNegInf};
  float row_sum[2] = {0.f, 0.f};  // this thread's partial sums; quad-reduced at the end
  const bool softcap = p.softcap_scale > 0.f;
  const float scale_log2 = p.score_scale_log2;

  // Tiles t_begin + warp, + kWarps, ...: this warp's.
  const int first_tile = t_begin + warp;
  const int n_tiles = first_tile < t_end ? (t_end - 1 - first_tile) / kWarps + 1 : 0;
  if (n_tiles > 0) load_kv(first_tile, 0);
  cp_async_fence();
  cp_async_wait<1>();  // Q (every thread's part of it)
  __syncthreads();

  for (int it = 0; it < n_tiles; ++it) {
    const int tile = first_tile + it * kWarps;
    const int stage = it & 1;
    if (it + 1 < n_tiles) load_kv(tile + kWarps, stage ^ 1);
    cp_async_fence();
    cp_async_wait<1>();  // this tile's group is complete; the next one may still fly
    __syncwarp();

    // S = Q K^T
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kRows>, Int<kBlockN>>{});
    clear(acc_s);
    accumulate_qk(mma, acc_s, s2r_q, tSsQ, tSrQ, tSrQ_view, s2r_k, s2r_k_thr.partition_S(sK(stage)),
                  tSrK, tSrK_view);
    if (softcap) softcap_scores(acc_s, p.softcap_scale);
    // Mask the tiles that cross a row's key range (sequence end, diagonal, window edge).
    const int col0 = tile * kBlockN;
    if (col0 < last.lo || col0 + kBlockN > first.hi) mask_scores(acc_s, tScS, col0, thread_keys);
    online_softmax(acc_s, acc_o, row_max, row_sum, scale_log2);
    accumulate_pv<Element>(mma, acc_s, acc_o, s2r_v, s2r_v_thr.partition_S(sVt(stage)), tOrVt,
                           tOrVt_view);
    __syncwarp();  // every lane is done with this stage before the next load refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its stages: the merge reuses them

  // Merge the warps: each writes its un-normalised O rows, its row maxima (scores, whose
  // exponent bases rebase_factor forms as the warp did) and its sums.
  float* merge_o = reinterpret_cast<float*>(smem + Traits::kSmemQ);  // [warp][row][stride]
  float* merge_max = merge_o + kWarps * kRows * Traits::kMergeRowStride;  // [warp][row]
  float* merge_sum = merge_max + kWarps * kRows;
  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kHeadDim>>{}));
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = thread_row[r];
    const float sum = quad_sum(row_sum[r]);
    if (lane % 4 == 0) {
      merge_max[warp * kRows + row] = row_max[r];
      merge_sum[warp * kRows + row] = sum;
    }
    CUTE_UNROLL
    for (int d8 = 0; d8 < size<2>(acc_o); ++d8) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        const int col = get<1>(tOcO(2 * r + c, 0, d8));
        merge_o[(warp * kRows + row) * Traits::kMergeRowStride + col] = acc_o(2 * r + c, 0, d8);
      }
    }
  }
  __syncthreads();

  const bool split_out = p.num_splits > 1;
  for (int e = tid; e < rows * kHeadDim; e += Traits::kThreads) {
    const int row = e / kHeadDim, col = e % kHeadDim;
    float m = kNegInf;
    CUTE_UNROLL
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, merge_max[w * kRows + row]);
    float sum = 0.f, o = 0.f;
    if (m != kNegInf) {
      CUTE_UNROLL
      for (int w = 0; w < kWarps; ++w) {
        const float mw = merge_max[w * kRows + row];
        const float f = rebase_factor(mw, m, scale_log2);
        sum += f * merge_sum[w * kRows + row];
        o += f * merge_o[(w * kRows + row) * Traits::kMergeRowStride + col];
      }
    } else {
      // No key seen by any warp; a NaN sum of a warp still propagates.
      CUTE_UNROLL
      for (int w = 0; w < kWarps; ++w) sum += merge_sum[w * kRows + row];
    }
    const float value = sum == 0.f ? 0.f : o / sum;
    const float lse =
        sum == 0.f ? kNegInf : (exp2_base(m, scale_log2) + log2f(sum)) * float(M_LN2);
    const int token = (row0 + row) / group, head = head_kv * group + (row0 + row) % group;
    const int64_t lse_index = (int64_t(batch) * p.heads_q + head) * seqlen_q + token;
    if (split_out) {
      const int64_t index = int64_t(split) * p.batch * p.heads_q * seqlen_q + lse_index;
      p.partial_out[index * kHeadDim + col] = value;
      if (col == 0) {
        p.partial_max[index] = m;
        p.partial_sum[index] = sum;
      }
    } else {
      static_cast<Element*>(p.out)[int64_t(batch) * p.out_batch_stride +
                                   int64_t(token) * p.out_row_stride +
                                   int64_t(head) * p.out_head_stride + col] = Element(value);
      if (col == 0 && p.lse != nullptr) p.lse[lse_index] = lse;
    }
  }
}

// The splits of each (sequence, query head, token) row merged: one warp a row, each lane a
// stride of the head dim. A split weighs its sum moved to the base of the row's largest
// maximum (rebase_factor): a split without keys (max -inf, sum 0) weighs 0; a NaN sum makes
// the row NaN.
template <class Element, int kHeadDim>
__global__ void flash_decode_combine_kernel(const FlashDecodeParams p) {
  const int64_t total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= total) return;
  const float scale_log2 = p.score_scale_log2;
  float m = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, p.partial_max[s * total + row]);
  auto weight = [&](int s) {
    return rebase_factor(p.partial_max[s * total + row], m, scale_log2) *
           p.partial_sum[s * total + row];
  };
  float sum = 0.f;
  for (int s = 0; s < p.num_splits; ++s) sum += weight(s);
  const int token = int(row % p.seqlen_q);
  const int head = int((row / p.seqlen_q) % p.heads_q);
  const int batch = int(row / (int64_t(p.seqlen_q) * p.heads_q));
  Element* out = static_cast<Element*>(p.out) + int64_t(batch) * p.out_batch_stride +
                 int64_t(token) * p.out_row_stride + int64_t(head) * p.out_head_stride;
  for (int col = lane; col < kHeadDim; col += 32) {
    float o = 0.f;
    if (m != -INFINITY) {
      for (int s = 0; s < p.num_splits; ++s)
        o += weight(s) * p.partial_out[(s * total + row) * kHeadDim + col];
    }
    out[col] = Element(sum == 0.f ? 0.f : o / sum);
  }
  if (lane == 0 && p.lse != nullptr)
    p.lse[row] =
        sum == 0.f ? -INFINITY : (exp2_base(m, scale_log2) + log2f(sum)) * float(M_LN2);
}

}  // namespace tilegrid::attention::flash
