#pragma once
// Portable flash attention forward (FlashAttention-2 structure, sm_80 and newer): one CTA per
// (query tile, head, sequence); each warp owns 16 query rows of the tile and keeps their
// output rows in registers. Per key tile: S = Q K^T on the tensor cores (mma.sync m16n8k16,
// fp32 accumulate), softcap, masking, an online softmax in fp32 in log2 units (one FFMA and
// one exp2 per score), then O += P V with P rounded to the input type. K and V tiles go
// through two shared-memory stages filled by cp.async: tile j+1 loads while tile j computes.
//
// Key tiles run from the last to the first, so the tiles that need masking (the sequence tail,
// the causal diagonal) come first and the rest skip the per-element mask. A row that sees no
// key keeps max = -inf and sum = 0 and is written as O = 0, LSE = -inf. A NaN score (or +inf,
// whose exponential is inf / inf) makes the sum NaN, and O and LSE with it, as in torch's math
// backend: fmaxf skips a NaN, so it is the sum that carries it.
#include <cutlass/array.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "attention/common/flash_fwd_params.h"
#include "attention/common/mask.h"
#include "attention/common/sequence.h"
#include "attention/common/softmax_base.cuh"
#include "attention/cuda/flash_fwd_tile.cuh"
#include "attention/cuda/flash_mma_util.cuh"

namespace tilegrid::attention::flash {

using namespace cute;

// Tile shapes per head dimension. Shared memory holds Q and two stages of K and V:
// (kBlockM + 4 kBlockN) x head_dim x 2 bytes. The fp32 registers a thread holds are its O rows
// (head_dim / 2) and its S tile (kBlockN / 2): 16 rows x n columns over 32 lanes.
//   d =  64: 128 x 128, 8 warps,  80 KB; O 32 + S 64 registers
//   d =  96: 128 x  64, 8 warps,  72 KB; O 48 + S 32
//   d = 128: 128 x  64, 8 warps,  96 KB; O 64 + S 32
//   d = 192:  64 x  64, 4 warps, 120 KB; O 96 + S 32
//   d = 256:  64 x  64, 4 warps, 160 KB (fits A100's 163 KB limit); O 128 + S 32
// ptxas (nvcc 13, sm_90) gives 250 / 205 / 237 / 255 / 255 registers per thread, so one CTA
// runs per SM whatever the shared memory would allow; d = 192 spills 16 bytes (60 on sm_80).
// Wider query tiles at d >= 192 would push O past 128 registers per thread and Q past the
// shared memory that two K/V stages leave.
template <int kHeadDim>
struct FwdTileShape;
template <>
struct FwdTileShape<64> {
  static constexpr int kBlockM = 128, kBlockN = 128;
};
template <>
struct FwdTileShape<96> {
  static constexpr int kBlockM = 128, kBlockN = 64;
};
template <>
struct FwdTileShape<128> {
  static constexpr int kBlockM = 128, kBlockN = 64;
};
template <>
struct FwdTileShape<192> {
  static constexpr int kBlockM = 64, kBlockN = 64;
};
template <>
struct FwdTileShape<256> {
  static constexpr int kBlockM = 64, kBlockN = 64;
};

template <class Element_, int kHeadDim_>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = FwdTileShape<kHeadDim>::kBlockM;
  static constexpr int kBlockN = FwdTileShape<kHeadDim>::kBlockN;
  static constexpr int kWarps = kBlockM / 16;  // 16 query rows per warp
  static constexpr int kThreads = kWarps * 32;

  using MmaOp = Mma16816<Element>;
  // Warps stacked along M; the N and K extents of 16 make one ldmatrix.x4 feed two atoms.
  using TiledMma =
      TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kWarps>, _1, _1>>, Tile<Int<kBlockM>, _16, _16>>;

  // Swizzled tiles (flash_mma_util.cuh); V read as the (head_dim x kBlockN) B operand of
  // P V: the same memory, coordinates swapped.
  using SmemLayoutQ = SmemTile<kBlockM, kHeadDim>;
  using SmemLayoutKV = SmemTile<kBlockN, kHeadDim>;
  using SmemLayoutVt = SmemTileTransposed<kBlockN, kHeadDim>;
  static constexpr int kSmemQ = int(cosize(SmemLayoutQ{}));
  static constexpr int kSmemKV = int(cosize(SmemLayoutKV{}));
  static constexpr int kStages = 2;
  static constexpr size_t kSmemBytes = size_t(kSmemQ + 2 * kStages * kSmemKV) * sizeof(Element);

  // Global -> shared: 16-byte cp.async per thread, a row chunk per 8 or 4 threads.
  using GmemCopy = GmemRowCopy<Element, kThreads, kHeadDim>;
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) flash_fwd_kernel(const FlashFwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr float kNegInf = -INFINITY;

  // Longest-running query tiles first (causal: the last rows see the most keys).
  const int m_block = int(gridDim.x) - 1 - int(blockIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int tid = threadIdx.x;

  const Sequence seq = sequence(p, batch);
  const int64_t q_token0 = seq.q0, k_token0 = seq.k0;
  const int seqlen_q = int(seq.sq), seqlen_k = int(seq.sk);
  const int row0 = m_block * kBlockM;
  if (row0 >= seqlen_q) return;
  const int rows = min(kBlockM, seqlen_q - row0);
  const int head_kv = head / p.group;

  const auto* q_ptr = static_cast<const Element*>(p.q) + batch * p.q_batch_stride +
                      q_token0 * p.q_row_stride + head * p.q_head_stride;
  const auto* k_ptr = static_cast<const Element*>(p.k) + batch * p.k_batch_stride +
                      k_token0 * p.k_row_stride + head_kv * p.k_head_stride;
  const auto* v_ptr = static_cast<const Element*>(p.v) + batch * p.v_batch_stride +
                      k_token0 * p.v_row_stride + head_kv * p.v_head_stride;
  auto* o_ptr = static_cast<Element*>(p.out) + batch * p.out_batch_stride +
                q_token0 * p.out_row_stride + head * p.out_head_stride;

  // Key tiles this query tile needs: from the first row's lowest visible key to the last
  // row's highest (both bounds grow with the row).
  const KeyRange first = key_range(p, row0, seqlen_q, seqlen_k);
  const KeyRange last = key_range(p, row0 + rows - 1, seqlen_q, seqlen_k);
  const int n_min = first.lo / kBlockN;
  const int n_max = last.hi > first.lo ? (last.hi + kBlockN - 1) / kBlockN : n_min;

  Tensor mQ = make_tensor(make_gmem_ptr(q_ptr), make_shape(seqlen_q, Int<kHeadDim>{}),
                          make_stride(p.q_row_stride, _1{}));
  Tensor mK = make_tensor(make_gmem_ptr(k_ptr), make_shape(seqlen_k, Int<kHeadDim>{}),
                          make_stride(p.k_row_stride, _1{}));
  Tensor mV = make_tensor(make_gmem_ptr(v_ptr), make_shape(seqlen_k, Int<kHeadDim>{}),
                          make_stride(p.v_row_stride, _1{}));
  Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
  Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));  // (N,D,n)
  Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));

  extern __shared__ __align__(128) char smem_raw[];
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  auto k_stage = [&](int s) { return smem + Traits::kSmemQ + s * 2 * Traits::kSmemKV; };
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

  typename Traits::GmemCopy gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  Tensor tQgQ = gmem_thr.partition_S(gQ);
  Tensor tQsQ = gmem_thr.partition_D(sQ);
  Tensor tKgK = gmem_thr.partition_S(gK);  // (CPY, CPY_N, CPY_K, n)
  Tensor tVgV = gmem_thr.partition_S(gV);
  Tensor tQcQ = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor tKVcKV = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  auto load_kv = [&](int n, int stage) {
    const int valid = seqlen_k - n * kBlockN;
    load_rows(gmem_copy, tKgK(_, _, _, n), gmem_thr.partition_D(sK(stage)), tKVcKV, valid);
    load_rows(gmem_copy, tVgV(_, _, _, n), gmem_thr.partition_D(sV(stage)), tKVcKV, valid);
  };

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);       // (MMA, MMA_M, MMA_K)
  Tensor tSrK = thr_mma.partition_fragment_B(sK(0));    // (MMA, MMA_N, MMA_K)
  Tensor tOrVt = thr_mma.partition_fragment_B(sVt(0));  // (MMA, MMA_D, MMA_N)
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  clear(acc_o);

  auto s2r_q = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma);
  auto s2r_q_thr = s2r_q.get_thread_slice(tid);
  Tensor tSsQ = s2r_q_thr.partition_S(sQ);
  Tensor tSrQ_view = s2r_q_thr.retile_D(tSrQ);
  auto s2r_k = make_tiled_copy_B(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma);
  auto s2r_k_thr = s2r_k.get_thread_slice(tid);
  Tensor tSrK_view = s2r_k_thr.retile_D(tSrK);
  auto s2r_v = make_tiled_copy_B(Copy_Atom<SM75_U16x8_LDSM_T, Element>{}, mma);
  auto s2r_v_thr = s2r_v.get_thread_slice(tid);
  Tensor tOrVt_view = s2r_v_thr.retile_D(tOrVt);

  // Tile coordinates of this thread's S elements; its two rows are those of values 0-1 and
  // 2-3 of each m16n8 fragment (rows g and g + 8 of the warp's 16).
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  int thread_row[2];
  KeyRange thread_keys[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    thread_row[r] = get<0>(tScS(2 * r, 0, 0));
    thread_keys[r] = key_range(p, int64_t(row0) + thread_row[r], seqlen_q, seqlen_k);
  }

  float row_max[2] = {kNegInf, kNegInf};
  float row_sum[2] = {0.f, 0.f};  // this thread's partial sums; quad-reduced at the end
  const bool softcap = p.softcap_scale > 0.f;
  const float scale_log2 = p.score_scale_log2;

  const int n_count = n_max - n_min;
  if (n_count > 0) {
    load_rows(gmem_copy, tQgQ, tQsQ, tQcQ, rows);
    load_kv(n_max - 1, 0);
  }
  cp_async_fence();

  for (int it = 0; it < n_count; ++it) {
    const int n = n_max - 1 - it;
    const int stage = it & 1;
    if (it + 1 < n_count) load_kv(n - 1, stage ^ 1);
    cp_async_fence();
    cp_async_wait<1>();  // this tile's group is complete; the next one may still fly
    __syncthreads();

    // S = Q K^T
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    accumulate_qk(mma, acc_s, s2r_q, tSsQ, tSrQ, tSrQ_view, s2r_k, s2r_k_thr.partition_S(sK(stage)),
                  tSrK, tSrK_view);

    if (softcap) softcap_scores(acc_s, p.softcap_scale);
    // Mask only the tiles that cross a row's key range (sequence tail, diagonal, window edge).
    const int col0 = n * kBlockN;
    if (col0 < last.lo || col0 + kBlockN > first.hi) mask_scores(acc_s, tScS, col0, thread_keys);
    online_softmax(acc_s, acc_o, row_max, row_sum, scale_log2);
    accumulate_pv<Element>(mma, acc_s, acc_o, s2r_v, s2r_v_thr.partition_S(sVt(stage)), tOrVt,
                           tOrVt_view);
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  cp_async_wait<0>();

  // Epilogue: O / sum to the output type, LSE = (max * scale + log2(sum)) * ln 2.
  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  float* lse_ptr = p.lse == nullptr ? nullptr
                                    : p.lse + batch * p.lse_batch_stride +
                                          head * p.lse_head_stride + q_token0 + row0;
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(row_sum[r]);
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
    const int row = thread_row[r];
    if (row < rows) {
      CUTE_UNROLL
      for (int d8 = 0; d8 < size<2>(acc_o); ++d8) {
        cutlass::AlignedArray<Element, 2> pair;
        pair[0] = Element(acc_o(2 * r, 0, d8) * inv);
        pair[1] = Element(acc_o(2 * r + 1, 0, d8) * inv);
        const int col = get<1>(tOcO(2 * r, 0, d8));
        *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(
            o_ptr + (int64_t(row0) + row) * p.out_row_stride + col) = pair;
      }
      if (lse_ptr != nullptr && tid % 4 == 0)
        lse_ptr[row] =
            sum == 0.f ? kNegInf : (exp2_base(row_max[r], scale_log2) + log2f(sum)) * float(M_LN2);
    }
  }
}

}  // namespace tilegrid::attention::flash
