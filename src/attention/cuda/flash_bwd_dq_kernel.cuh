#pragma once
// dQ of the portable attention backward on the tensor cores (mma.sync m16n8k16, fp32
// accumulation; sm_80 and newer), in the forward kernel's shape: one CTA a tile of kBlockM
// queries of one head, each warp 16 query rows with their dQ rows in registers, walking the
// key tiles the queries see (two cp.async stages of K and V). Per key tile:
//   S = Q K^T and dP = dO V^T, dS = P (dP - D) with P recomputed from lse,
//   dQ += dS K, dS fed to the tensor cores from registers (no shared memory round trip).
// It recomputes the two products the dK/dV kernel also forms - the price of writing dQ once,
// with no atomics and no fp32 scratch, so that the result has the same bits on every run.
#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "attention/common/flash_bwd_score.cuh"
#include "attention/common/mask.h"
#include "attention/cuda/flash_bwd_delta.cuh"
#include "attention/cuda/flash_mma_util.cuh"

namespace tilegrid::attention::flash_bwd {

using namespace cute;

// A thread holds its dQ rows (head_dim / 2 fp32 registers) and its S and dP tiles (kBlockN / 2
// each): 32 + 64 / 48 + 64 / 64 + 64 / 96 + 32 / 128 + 32 at head dim 64 / 96 / 128 / 192 /
// 256. Shared memory: Q and dO, two stages of K and V.
template <int kHeadDim>
struct DqTileShape {
  static constexpr int kBlockM = kHeadDim <= 128 ? 128 : 64;
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;
};

template <class Element_, int kHeadDim_>
struct DqTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = DqTileShape<kHeadDim>::kBlockM;
  static constexpr int kBlockN = DqTileShape<kHeadDim>::kBlockN;
  static constexpr int kWarps = kBlockM / 16;  // 16 query rows a warp
  static constexpr int kThreads = kWarps * 32;

  using TiledMma = TiledMMA<MMA_Atom<flash::Mma16816<Element>>, Layout<Shape<Int<kWarps>, _1, _1>>,
                            Tile<Int<kBlockM>, _16, _16>>;
  using SmemLayoutQ = flash::SmemTile<kBlockM, kHeadDim>;             // Q, dO
  using SmemLayoutKV = flash::SmemTile<kBlockN, kHeadDim>;            // K, V (a stage each)
  using SmemLayoutKt = flash::SmemTileTransposed<kBlockN, kHeadDim>;  // K as B of dS K
  static constexpr int kSmemQ = int(cosize(SmemLayoutQ{}));
  static constexpr int kSmemKV = int(cosize(SmemLayoutKV{}));
  // Element offsets: Q, dO | stage 0: K, V | stage 1: K, V.
  static constexpr int kOffsetKV = 2 * kSmemQ;
  static constexpr size_t kSmemBytes = size_t(kOffsetKV + 4 * kSmemKV) * sizeof(Element);

  using GmemCopy = flash::GmemRowCopy<Element, kThreads, kHeadDim>;
};

// Grid (ceil(max_seqlen_q / kBlockM), heads_q, batch); the last query tiles (which see the
// most keys under a causal mask) start first.
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) dq_kernel(const FlashBwdParams g) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const FlashFwdParams& p = g.fwd;
  const int m_block = int(gridDim.x) - 1 - int(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group, tid = threadIdx.x;
  const Sequence seq = sequence(p, b);
  const int64_t row0 = int64_t(m_block) * kBlockM;
  if (row0 >= seq.sq) return;
  const int rows = int(seq.sq - row0 < kBlockM ? seq.sq - row0 : kBlockM);

  // Key tiles the query tile sees (both ends of a query's key range grow with the query).
  const Mask mask{seq.sq, seq.sk, p.window_left, p.window_right};
  const IndexRange first_keys = mask.keys_of_query(row0);
  const IndexRange last_keys = mask.keys_of_query(row0 + rows - 1);
  const IndexRange keys{first_keys.first, last_keys.last};
  const int n_first = keys.empty() ? 0 : int(keys.first / kBlockN);
  const int n_count = keys.empty() ? 0 : int(keys.last / kBlockN) + 1 - n_first;

  extern __shared__ __align__(128) char smem_raw[];
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem + Traits::kSmemQ), typename Traits::SmemLayoutQ{});
  auto k_stage = [&](int s) { return smem + Traits::kOffsetKV + s * 2 * Traits::kSmemKV; };
  auto v_stage = [&](int s) { return k_stage(s) + Traits::kSmemKV; };

  typename Traits::GmemCopy gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  const auto tile = [](const Element* ptr, int64_t row_stride, auto rows_) {
    return make_tensor(make_gmem_ptr(ptr), make_shape(rows_, Int<kHeadDim>{}),
                       make_stride(row_stride, _1{}));
  };
  const int64_t q_token = seq.q0 + row0;
  const auto* q_ptr = static_cast<const Element*>(p.q) + b * p.q_batch_stride +
                      q_token * p.q_row_stride + h * p.q_head_stride;
  const auto* do_ptr = static_cast<const Element*>(g.dout) + b * g.dout_batch_stride +
                       q_token * g.dout_row_stride + h * g.dout_head_stride;
  const auto* k_base = static_cast<const Element*>(p.k) + b * p.k_batch_stride +
                       seq.k0 * p.k_row_stride + hk * p.k_head_stride;
  const auto* v_base = static_cast<const Element*>(p.v) + b * p.v_batch_stride +
                       seq.k0 * p.v_row_stride + hk * p.v_head_stride;
  const Tensor tKVc = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // Key tile n into a stage; rows past the sequence zero (0 x garbage would poison dQ).
  auto load_kv = [&](int n, int stage) {
    const int64_t key0 = int64_t(n) * kBlockN;
    const int valid = int(seq.sk - key0 < kBlockN ? seq.sk - key0 : kBlockN);
    flash::load_rows(
        gmem_copy,
        gmem_thr.partition_S(tile(k_base + key0 * p.k_row_stride, p.k_row_stride, Int<kBlockN>{})),
        gmem_thr.partition_D(make_tensor(make_smem_ptr(k_stage(stage)), typename Traits::SmemLayoutKV{})),
        tKVc, valid);
    flash::load_rows(
        gmem_copy,
        gmem_thr.partition_S(tile(v_base + key0 * p.v_row_stride, p.v_row_stride, Int<kBlockN>{})),
        gmem_thr.partition_D(make_tensor(make_smem_ptr(v_stage(stage)), typename Traits::SmemLayoutKV{})),
        tKVc, valid);
  };

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor acc_dq = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  clear(acc_dq);

  // This thread's two query rows (values 0-1 and 2-3 of each m16n8 fragment): their key
  // ranges, lse (log2 units; +inf past the sequence: P = 0) and D.
  const Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  IndexRange row_keys[2];
  float row_lse[2], row_delta[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = get<0>(tScS(2 * r));
    row_keys[r] = row < rows ? mask.keys_of_query(row0 + row) : IndexRange{};
    const int64_t at = lse_index(p, b, h, q_token + row);
    row_lse[r] = row < rows ? backward_lse_log2(p.lse[at]) : INFINITY;
    row_delta[r] = row < rows ? g.delta[at] : 0.f;
  }
  const ScoreGradFn score_grad(g);

  if (n_count > 0) {
    const Tensor tQc = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    flash::load_rows(gmem_copy, gmem_thr.partition_S(tile(q_ptr, p.q_row_stride, Int<kBlockM>{})),
                     gmem_thr.partition_D(sQ), tQc, rows);
    flash::load_rows(gmem_copy, gmem_thr.partition_S(tile(do_ptr, g.dout_row_stride, Int<kBlockM>{})),
                     gmem_thr.partition_D(sdO), tQc, rows);
    load_kv(n_first, 0);
  }
  cp_async_fence();
  for (int it = 0; it < n_count; ++it) {
    const int n = n_first + it, stage = it & 1;
    if (it + 1 < n_count) load_kv(n + 1, stage ^ 1);
    cp_async_fence();
    cp_async_wait<1>();
    __syncthreads();

    Tensor sK = make_tensor(make_smem_ptr(k_stage(stage)), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(v_stage(stage)), typename Traits::SmemLayoutKV{});
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    clear(acc_dp);
    flash::gemm_smem<SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N>(mma, acc_s, sQ, sK, tid);
    flash::gemm_smem<SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N>(mma, acc_dp, sdO, sV, tid);

    // Only tiles that cross an edge of some row's key range test each element.
    const int64_t key0 = int64_t(n) * kBlockN;
    const bool whole = rows == kBlockM && last_keys.first <= key0 &&
                       first_keys.last >= key0 + kBlockN - 1;
    Tensor rdS = make_tensor<Element>(acc_s.layout());
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) {
      const int r = (i % 4) / 2;
      ScoreGrad sg{0.f, 0.f};
      if (whole || row_keys[r].contains(key0 + get<1>(tScS(i))))
        sg = score_grad(acc_s(i), acc_dp(i), row_lse[r], row_delta[r]);
      rdS(i) = Element(sg.dx);
    }
    Tensor tdQrdS = make_tensor(rdS.data(), flash::c_layout_as_a(rdS.layout()));
    flash::gemm_rs<SM75_U16x8_LDSM_T>(
        mma, acc_dq, tdQrdS, make_tensor(sK.data(), typename Traits::SmemLayoutKt{}), tid);
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  cp_async_wait<0>();

  // dQ = scale * (dS K): rows of the sequence, neighbouring columns as one 32-bit store; a
  // tile that sees no key writes zeros.
  auto* dq_ptr = static_cast<Element*>(g.dq) + b * g.dq_batch_stride +
                 q_token * g.dq_row_stride + h * g.dq_head_stride;
  const Tensor tDc = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  CUTE_UNROLL
  for (int i = 0; i < size(acc_dq); i += 2) {
    const int row = get<0>(tDc(i)), col = get<1>(tDc(i));
    if (row >= rows) continue;
    cutlass::AlignedArray<Element, 2> pair;
    pair[0] = Element(acc_dq(i) * g.scale);
    pair[1] = Element(acc_dq(i + 1) * g.scale);
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(dq_ptr + int64_t(row) * g.dq_row_stride +
                                                          col) = pair;
  }
}

}  // namespace tilegrid::attention::flash_bwd
