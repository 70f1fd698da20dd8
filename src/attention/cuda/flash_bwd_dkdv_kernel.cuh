#pragma once
// dK and dV of the portable attention backward on the tensor cores (mma.sync m16n8k16, fp32
// accumulation; sm_80 and newer). One CTA owns kBlockN keys of one K/V head and keeps their
// dK and dV in registers while it walks every query tile that sees them, for every query head
// of the GQA group, so a group's dK/dV leave the chip once, final, and nothing is accumulated
// across CTAs (the same bits on every run). A step, for a tile of kBlockM queries:
//   S^T = K Q^T and dP^T = V dO^T                (keys as rows, so P^T and dS^T need no
//   P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - D)   transpose for the next products)
//   dV += P^T dO and dK += dS^T Q                (P^T and dS^T through shared memory: the warps
//                                                 split the head dim, not the queries)
// Q, dO, lse and D of step i + 1 load (cp.async, two stages) while step i computes. The key
// tile's K and V stay in shared memory. dK is scaled by the softmax scale once, at the end.
#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "attention/common/flash_bwd_score.cuh"
#include "attention/common/flash_bwd_store.cuh"
#include "attention/common/mask.h"
#include "attention/cuda/flash_bwd_delta.cuh"
#include "attention/cuda/flash_mma_util.cuh"

namespace tilegrid::attention::flash_bwd {

using namespace cute;

// kBlockN keys a CTA, kBlockM queries a step; 8 warps, kWarpsN x kWarpsC, tile every product's
// output (rows x columns). A thread's dK and dV are kBlockN x head_dim x 2 / 256 fp32
// registers: 64 / 96 / 128 / 96 / 128 at head dim 64 / 96 / 128 / 192 / 256; shared memory
// holds K, V, two stages of Q and dO, and P^T and dS^T.
template <int kHeadDim>
struct DkDvTileShape {
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;
  static constexpr int kBlockM = kHeadDim <= 128 ? 64 : 32;
  static constexpr int kWarpsN = 4, kWarpsC = 2;
};

template <class Element_, int kHeadDim_>
struct DkDvTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = DkDvTileShape<kHeadDim>::kBlockN;
  static constexpr int kBlockM = DkDvTileShape<kHeadDim>::kBlockM;
  static constexpr int kWarpsN = DkDvTileShape<kHeadDim>::kWarpsN;
  static constexpr int kWarpsC = DkDvTileShape<kHeadDim>::kWarpsC;
  static constexpr int kThreads = 32 * kWarpsN * kWarpsC;
  static_assert(kBlockN % (16 * kWarpsN) == 0 && kBlockM % (16 * kWarpsC) == 0 &&
                kHeadDim % (16 * kWarpsC) == 0);

  // The N and K extents of 16 per warp make one ldmatrix.x4 feed two atoms.
  using TiledMma = TiledMMA<MMA_Atom<flash::Mma16816<Element>>,
                            Layout<Shape<Int<kWarpsN>, Int<kWarpsC>, _1>>,
                            Tile<Int<16 * kWarpsN>, Int<16 * kWarpsC>, _16>>;

  using SmemLayoutKV = flash::SmemTile<kBlockN, kHeadDim>;           // K, V
  using SmemLayoutQ = flash::SmemTile<kBlockM, kHeadDim>;            // Q, dO (a stage each)
  using SmemLayoutQt = flash::SmemTileTransposed<kBlockM, kHeadDim>;  // as B of dS^T Q, P^T dO
  using SmemLayoutP = flash::SmemTile<kBlockN, kBlockM>;             // P^T, dS^T
  static constexpr int kSmemKV = int(cosize(SmemLayoutKV{}));
  static constexpr int kSmemQ = int(cosize(SmemLayoutQ{}));
  static constexpr int kSmemP = int(cosize(SmemLayoutP{}));
  // Element offsets: K, V | stage 0: Q, dO | stage 1: Q, dO | P^T, dS^T | then floats: lse and
  // D of stage 0, of stage 1.
  static constexpr int kOffsetQ = 2 * kSmemKV;
  static constexpr int kOffsetP = kOffsetQ + 4 * kSmemQ;
  static constexpr int kOffsetRowData = kOffsetP + 2 * kSmemP;
  static constexpr size_t kSmemBytes =
      size_t(kOffsetRowData) * sizeof(Element) + 4 * kBlockM * sizeof(float);
  static_assert(kOffsetRowData * sizeof(Element) % 16 == 0);

  using GmemCopy = flash::GmemRowCopy<Element, kThreads, kHeadDim>;
};

// Grid (ceil(max_seqlen_k / kBlockN), heads_kv, batch).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) dkdv_kernel(const FlashBwdParams g) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const FlashFwdParams& p = g.fwd;
  const int hk = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const Sequence seq = sequence(p, b);
  const int64_t n0 = int64_t(blockIdx.x) * kBlockN;
  if (n0 >= seq.sk) return;
  const int key_rows = int(seq.sk - n0 < kBlockN ? seq.sk - n0 : kBlockN);

  // Query tiles that see the key tile (both ends of a key's query range grow with the key).
  const Mask mask{seq.sq, seq.sk, p.window_left, p.window_right};
  const IndexRange queries{mask.queries_of_key(n0).first,
                           mask.queries_of_key(n0 + key_rows - 1).last};
  const int m_first = queries.empty() ? 0 : int(queries.first / kBlockM);
  const int m_count = queries.empty() ? 0 : int(queries.last / kBlockM) + 1 - m_first;
  const int steps = m_count * p.group;

  extern __shared__ __align__(128) char smem_raw[];
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  float* row_data = reinterpret_cast<float*>(smem + Traits::kOffsetRowData);
  Tensor sK = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem + Traits::kSmemKV), typename Traits::SmemLayoutKV{});
  auto q_stage = [&](int s) { return smem + Traits::kOffsetQ + s * 2 * Traits::kSmemQ; };
  auto do_stage = [&](int s) { return q_stage(s) + Traits::kSmemQ; };
  auto lse_stage = [&](int s) { return row_data + s * 2 * kBlockM; };
  auto delta_stage = [&](int s) { return lse_stage(s) + kBlockM; };
  Tensor sPt = make_tensor(make_smem_ptr(smem + Traits::kOffsetP), typename Traits::SmemLayoutP{});
  Tensor sdSt = make_tensor(make_smem_ptr(smem + Traits::kOffsetP + Traits::kSmemP),
                            typename Traits::SmemLayoutP{});

  typename Traits::GmemCopy gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  const Tensor cKV = make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{});
  const Tensor cQ = make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{});
  const auto tile = [](const Element* ptr, int64_t row_stride, auto rows) {
    return make_tensor(make_gmem_ptr(ptr), make_shape(rows, Int<kHeadDim>{}),
                       make_stride(row_stride, _1{}));
  };

  {  // K and V of the key tile, rows past the sequence zero
    const auto* k_ptr = static_cast<const Element*>(p.k) + b * p.k_batch_stride +
                        (seq.k0 + n0) * p.k_row_stride + hk * p.k_head_stride;
    const auto* v_ptr = static_cast<const Element*>(p.v) + b * p.v_batch_stride +
                        (seq.k0 + n0) * p.v_row_stride + hk * p.v_head_stride;
    const Tensor tKVc = gmem_thr.partition_S(cKV);
    flash::load_rows(gmem_copy, gmem_thr.partition_S(tile(k_ptr, p.k_row_stride, Int<kBlockN>{})),
                     gmem_thr.partition_D(sK), tKVc, key_rows);
    flash::load_rows(gmem_copy, gmem_thr.partition_S(tile(v_ptr, p.v_row_stride, Int<kBlockN>{})),
                     gmem_thr.partition_D(sV), tKVc, key_rows);
  }

  // Step s: query head hk * group + s / m_count, query tile m_first + s % m_count. Rows past
  // the sequence load as zeros (0 x garbage would poison dV and dK) with lse = +inf (P = 0).
  const Tensor tQc = gmem_thr.partition_S(cQ);
  auto load_step = [&](int s, int stage) {
    const int h = hk * p.group + s / m_count;
    const int64_t row0 = int64_t(m_first + s % m_count) * kBlockM;
    const int rows = int(seq.sq - row0 < kBlockM ? seq.sq - row0 : kBlockM);
    const int64_t token = seq.q0 + row0;
    const auto* q_ptr = static_cast<const Element*>(p.q) + b * p.q_batch_stride +
                        token * p.q_row_stride + h * p.q_head_stride;
    const auto* do_ptr = static_cast<const Element*>(g.dout) + b * g.dout_batch_stride +
                         token * g.dout_row_stride + h * g.dout_head_stride;
    flash::load_rows(gmem_copy, gmem_thr.partition_S(tile(q_ptr, p.q_row_stride, Int<kBlockM>{})),
                     gmem_thr.partition_D(make_tensor(make_smem_ptr(q_stage(stage)),
                                                      typename Traits::SmemLayoutQ{})),
                     tQc, rows);
    flash::load_rows(
        gmem_copy, gmem_thr.partition_S(tile(do_ptr, g.dout_row_stride, Int<kBlockM>{})),
        gmem_thr.partition_D(
            make_tensor(make_smem_ptr(do_stage(stage)), typename Traits::SmemLayoutQ{})),
        tQc, rows);
    if (tid < kBlockM) {  // lse and D: 4-byte cp.async into the same group
      if (tid < rows) {
        const int64_t at = lse_index(p, b, h, token + tid);
        SM80_CP_ASYNC_CACHEALWAYS<float>::copy(p.lse[at], lse_stage(stage)[tid]);
        SM80_CP_ASYNC_CACHEALWAYS<float>::copy(g.delta[at], delta_stage(stage)[tid]);
      } else {
        lse_stage(stage)[tid] = INFINITY;
        delta_stage(stage)[tid] = 0.f;
      }
    }
  };

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor acc_dk = partition_fragment_C(mma, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(mma, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);
  // (key, query) tile coordinates of this thread's S^T elements.
  const Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
  Tensor tPsP = thr_mma.partition_C(sPt);
  Tensor tdSsdS = thr_mma.partition_C(sdSt);
  const ScoreGradFn score_grad(g);

  if (steps > 0) load_step(0, 0);
  cp_async_fence();
  for (int s = 0; s < steps; ++s) {
    const int stage = s & 1;
    if (s + 1 < steps) load_step(s + 1, stage ^ 1);
    cp_async_fence();
    cp_async_wait<1>();  // this step's group is complete; the next one may still fly
    // A thread's own lse copy is complete here: it turns it into log2 units (NaN past the
    // backward's limit, backward_lse_log2) before the barrier shows it to the others, once a
    // row rather than once a score.
    if (tid < kBlockM) lse_stage(stage)[tid] = backward_lse_log2(lse_stage(stage)[tid]);
    __syncthreads();

    Tensor sQ = make_tensor(make_smem_ptr(q_stage(stage)), typename Traits::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(do_stage(stage)), typename Traits::SmemLayoutQ{});
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kBlockN>, Int<kBlockM>>{});
    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<kBlockN>, Int<kBlockM>>{});
    clear(acc_s);
    clear(acc_dp);
    flash::gemm_smem<SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N>(mma, acc_s, sK, sQ, tid);
    flash::gemm_smem<SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N>(mma, acc_dp, sV, sdO, tid);

    // Every (key, query) pair of the step is visible unless the tile crosses the sequence's
    // end or an edge of the mask; only then is each element tested.
    const int64_t row0 = int64_t(m_first + s % m_count) * kBlockM;
    const bool whole = key_rows == kBlockN && row0 + kBlockM <= seq.sq &&
                       mask.queries_of_key(n0 + kBlockN - 1).first <= row0 &&
                       mask.queries_of_key(n0).last >= row0 + kBlockM - 1;
    const float* lse = lse_stage(stage);  // log2 units
    const float* delta = delta_stage(stage);
    // Values 2c and 2c + 1 of the fragment are neighbouring queries of one key (the swizzle
    // moves 8-element units only): one 32-bit store each for P^T and dS^T.
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); i += 2) {
      const int key = get<0>(tScS(i)), query = get<1>(tScS(i));
      cutlass::AlignedArray<Element, 2> p_pair, ds_pair;
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        ScoreGrad sg{0.f, 0.f};
        if (whole ||
            (key < key_rows && mask.queries_of_key(n0 + key).contains(row0 + query + c)))
          sg = score_grad(acc_s(i + c), acc_dp(i + c), lse[query + c], delta[query + c]);
        p_pair[c] = Element(sg.p);
        ds_pair[c] = Element(sg.dx);
      }
      *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(&tPsP(i)) = p_pair;
      *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(&tdSsdS(i)) = ds_pair;
    }
    __syncthreads();  // P^T and dS^T are whole

    flash::gemm_smem<SM75_U32x4_LDSM_N, SM75_U16x8_LDSM_T>(
        mma, acc_dv, sPt, make_tensor(sdO.data(), typename Traits::SmemLayoutQt{}), tid);
    flash::gemm_smem<SM75_U32x4_LDSM_N, SM75_U16x8_LDSM_T>(
        mma, acc_dk, sdSt, make_tensor(sQ.data(), typename Traits::SmemLayoutQt{}), tid);
    __syncthreads();  // this stage and P^T / dS^T are free for the next step
  }
  cp_async_wait<0>();

  // Epilogue: rows of the sequence only.
  const Tensor tDc = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  store_dk_dv<Element>(g, b, seq.k0 + n0, hk, key_rows, acc_dk, acc_dv, tDc);
}

}  // namespace tilegrid::attention::flash_bwd
