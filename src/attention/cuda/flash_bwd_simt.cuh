#pragma once
// The attention backward on the CUDA cores (internal): the fallback for GPUs whose shared
// memory per block is below what the tensor-core kernels need (flash_bwd_launch.cuh picks it:
// e.g. sm_86 / sm_89 allow 99 KB, the dK/dV kernel takes up to 165 KB). The FlashAttention-2
// recomputation with no tensor cores and no atomics:
//  - dK, dV: one CTA a tile of 32 keys of one K/V head, looping over the query rows that see
//    it for every query head of the GQA group, dK and dV in registers;
//  - dQ: one CTA a tile of 32 queries of one head, looping over the keys it sees.
// 128 threads: 4 a key (or query) row, each holding every 4th column, so that a row's dot
// products reduce over 4 lanes. Static shared memory under 48 KB. 5-6 TFLOP/s on an H200
// (bench/results/2026-12-01_h200_attention_backward_portable.json): a correctness path.
// It reads the row deltas of delta_kernel (flash_bwd_delta.cuh).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention/common/flash_bwd_score.cuh"
#include "attention/common/mask.h"
#include "attention/cuda/flash_bwd_delta.cuh"
#include "core/cuda_convert.cuh"

namespace tilegrid::attention::flash_bwd::simt {

using cuda_convert::from_float;
using cuda_convert::to_float;

constexpr int kThreads = 128;
constexpr int kTile = 32;          // keys (dK/dV kernel) or queries (dQ kernel) a CTA
constexpr int kThreadsPerRow = 4;  // kTile * kThreadsPerRow == kThreads
constexpr int kPad = 2;            // 16-bit elements a shared row is padded by (banks)
static_assert(kTile * kThreadsPerRow == kThreads);

// Rows of the streamed operand a CTA stages at once: 8, or 4 at head dims above 128 so that
// the static shared memory stays under 48 KB (two 32-row 16-bit tiles plus two float stages).
template <int kHeadDim>
constexpr int kStageRows = kHeadDim <= 128 ? 8 : 4;

// The gradient of one score: dX = dS * dsoftcap, from the raw dot products s = q.k and
// dp = dO.v; 0 where the key is masked or the row sees no key (lse -inf); NaN where the
// forward's row was NaN (lse NaN). Also P, for dV.
struct SimtScoreGrad {
  float p, dx;
};

__device__ __forceinline__ SimtScoreGrad simt_score_grad(const FlashBwdParams& g, float s, float dp,
                                                float lse, float delta, bool visible) {
  if (!visible || lse == -INFINITY) return {0.f, 0.f};
  if (isnan(flash_bwd::backward_lse_log2(lse))) return {NAN, NAN};  // past the limit, or NaN
  float x, dsoftcap = 1.f;
  if (g.softcap > 0) {
    const float t = tanhf(s * (g.scale / g.softcap));
    x = g.softcap * t;
    dsoftcap = 1.f - t * t;
  } else {
    x = s * g.scale;
  }
  const float prob = expf(x - lse);
  return {prob, prob * (dp - delta) * dsoftcap};
}

__device__ __forceinline__ float sum_over_row_threads(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// 2. dK and dV of 32 keys of K/V head blockIdx.y. Grid (ceil(max_seqlen_k / 32), heads_kv,
// batch).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const FlashBwdParams g) {
  constexpr int kCols = kHeadDim / kThreadsPerRow, kRows = kStageRows<kHeadDim>;
  __shared__ Element s_k[kTile][kHeadDim + kPad], s_v[kTile][kHeadDim + kPad];
  __shared__ float s_q[kRows][kHeadDim], s_dout[kRows][kHeadDim], s_lse[kRows], s_delta[kRows];
  const FlashFwdParams& p = g.fwd;
  const int b = blockIdx.z, hk = blockIdx.y, tid = threadIdx.x;
  const Sequence seq = sequence(p, b);
  const int64_t j0 = int64_t(blockIdx.x) * kTile;
  if (j0 >= seq.sk) return;
  const int row = tid / kThreadsPerRow, part = tid % kThreadsPerRow;  // column part + 4 m
  const int64_t j = j0 + row;

  for (int e = tid; e < kTile * kHeadDim; e += kThreads) {
    const int r = e / kHeadDim, c = e % kHeadDim;
    const int64_t token = seq.k0 + j0 + r;
    const bool in = j0 + r < seq.sk;
    const int64_t ko = b * p.k_batch_stride + token * p.k_row_stride + hk * p.k_head_stride + c;
    const int64_t vo = b * p.v_batch_stride + token * p.v_row_stride + hk * p.v_head_stride + c;
    s_k[r][c] = in ? static_cast<const Element*>(p.k)[ko] : from_float<Element>(0.f);
    s_v[r][c] = in ? static_cast<const Element*>(p.v)[vo] : from_float<Element>(0.f);
  }
  const Mask mask{seq.sq, seq.sk, p.window_left, p.window_right};
  const int64_t last_key = j0 + kTile - 1 < seq.sk - 1 ? j0 + kTile - 1 : seq.sk - 1;
  const IndexRange queries{mask.queries_of_key(j0).first, mask.queries_of_key(last_key).last};

  float dk[kCols] = {}, dv[kCols] = {};
  for (int h = hk * p.group; h < (hk + 1) * p.group; ++h) {
    for (int64_t i0 = queries.first; i0 <= queries.last; i0 += kRows) {
      __syncthreads();  // the previous stage is read
      for (int e = tid; e < kRows * kHeadDim; e += kThreads) {
        const int r = e / kHeadDim, c = e % kHeadDim;
        const int64_t token = seq.q0 + i0 + r;
        const bool in = i0 + r <= queries.last;
        const int64_t qo = b * p.q_batch_stride + token * p.q_row_stride + h * p.q_head_stride + c;
        const int64_t go =
            b * g.dout_batch_stride + token * g.dout_row_stride + h * g.dout_head_stride + c;
        s_q[r][c] = in ? to_float(static_cast<const Element*>(p.q)[qo]) : 0.f;
        s_dout[r][c] = in ? to_float(static_cast<const Element*>(g.dout)[go]) : 0.f;
      }
      if (tid < kRows) {
        const bool in = i0 + tid <= queries.last;
        const int64_t at = lse_index(p, b, h, seq.q0 + i0 + tid);
        s_lse[tid] = in ? p.lse[at] : -INFINITY;
        s_delta[tid] = in ? g.delta[at] : 0.f;
      }
      __syncthreads();
      for (int r = 0; r < kRows; ++r) {
        const int64_t i = i0 + r;
        if (i > queries.last) break;  // the same for every thread: the shuffles stay whole
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int m = 0; m < kCols; ++m) {
          const int c = part + kThreadsPerRow * m;
          s += s_q[r][c] * to_float(s_k[row][c]);
          dp += s_dout[r][c] * to_float(s_v[row][c]);
        }
        s = sum_over_row_threads(s);
        dp = sum_over_row_threads(dp);
        const SimtScoreGrad sg =
            simt_score_grad(g, s, dp, s_lse[r], s_delta[r], j < seq.sk && mask.sees(i, j));
#pragma unroll
        for (int m = 0; m < kCols; ++m) {
          const int c = part + kThreadsPerRow * m;
          dv[m] += sg.p * s_dout[r][c];
          dk[m] += g.scale * sg.dx * s_q[r][c];
        }
      }
    }
  }
  if (j >= seq.sk) return;
  const int64_t token = seq.k0 + j;
  auto* dk_row = static_cast<Element*>(g.dk) + b * g.dk_batch_stride + token * g.dk_row_stride +
                 hk * g.dk_head_stride;
  auto* dv_row = static_cast<Element*>(g.dv) + b * g.dk_batch_stride + token * g.dk_row_stride +
                 hk * g.dk_head_stride;
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    dk_row[part + kThreadsPerRow * m] = from_float<Element>(dk[m]);
    dv_row[part + kThreadsPerRow * m] = from_float<Element>(dv[m]);
  }
}

// 3. dQ of 32 queries of head blockIdx.y. Grid (ceil(max_seqlen_q / 32), heads_q, batch).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) dq_kernel(const FlashBwdParams g) {
  constexpr int kCols = kHeadDim / kThreadsPerRow, kRows = kStageRows<kHeadDim>;
  __shared__ Element s_q[kTile][kHeadDim + kPad], s_dout[kTile][kHeadDim + kPad];
  __shared__ float s_k[kRows][kHeadDim], s_v[kRows][kHeadDim];
  const FlashFwdParams& p = g.fwd;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group, tid = threadIdx.x;
  const Sequence seq = sequence(p, b);
  const int64_t i0 = int64_t(blockIdx.x) * kTile;
  if (i0 >= seq.sq) return;
  const int row = tid / kThreadsPerRow, part = tid % kThreadsPerRow;
  const int64_t i = i0 + row;

  for (int e = tid; e < kTile * kHeadDim; e += kThreads) {
    const int r = e / kHeadDim, c = e % kHeadDim;
    const int64_t token = seq.q0 + i0 + r;
    const bool in = i0 + r < seq.sq;
    const int64_t qo = b * p.q_batch_stride + token * p.q_row_stride + h * p.q_head_stride + c;
    const int64_t go =
        b * g.dout_batch_stride + token * g.dout_row_stride + h * g.dout_head_stride + c;
    s_q[r][c] = in ? static_cast<const Element*>(p.q)[qo] : from_float<Element>(0.f);
    s_dout[r][c] = in ? static_cast<const Element*>(g.dout)[go] : from_float<Element>(0.f);
  }
  float lse = -INFINITY, delta = 0.f;
  if (i < seq.sq) {
    const int64_t at = lse_index(p, b, h, seq.q0 + i);
    lse = p.lse[at];
    delta = g.delta[at];
  }
  const Mask mask{seq.sq, seq.sk, p.window_left, p.window_right};
  const int64_t last_query = i0 + kTile - 1 < seq.sq - 1 ? i0 + kTile - 1 : seq.sq - 1;
  const IndexRange keys{mask.keys_of_query(i0).first, mask.keys_of_query(last_query).last};

  float dq[kCols] = {};
  for (int64_t j0 = keys.first; j0 <= keys.last; j0 += kRows) {
    __syncthreads();
    for (int e = tid; e < kRows * kHeadDim; e += kThreads) {
      const int r = e / kHeadDim, c = e % kHeadDim;
      const int64_t token = seq.k0 + j0 + r;
      const bool in = j0 + r <= keys.last;
      const int64_t ko = b * p.k_batch_stride + token * p.k_row_stride + hk * p.k_head_stride + c;
      const int64_t vo = b * p.v_batch_stride + token * p.v_row_stride + hk * p.v_head_stride + c;
      s_k[r][c] = in ? to_float(static_cast<const Element*>(p.k)[ko]) : 0.f;
      s_v[r][c] = in ? to_float(static_cast<const Element*>(p.v)[vo]) : 0.f;
    }
    __syncthreads();
    for (int r = 0; r < kRows; ++r) {
      const int64_t j = j0 + r;
      if (j > keys.last) break;
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int m = 0; m < kCols; ++m) {
        const int c = part + kThreadsPerRow * m;
        s += to_float(s_q[row][c]) * s_k[r][c];
        dp += to_float(s_dout[row][c]) * s_v[r][c];
      }
      s = sum_over_row_threads(s);
      dp = sum_over_row_threads(dp);
      const SimtScoreGrad sg = simt_score_grad(g, s, dp, lse, delta, i < seq.sq && mask.sees(i, j));
#pragma unroll
      for (int m = 0; m < kCols; ++m) dq[m] += g.scale * sg.dx * s_k[r][part + kThreadsPerRow * m];
    }
  }
  if (i >= seq.sq) return;
  auto* dq_row = static_cast<Element*>(g.dq) + b * g.dq_batch_stride +
                 (seq.q0 + i) * g.dq_row_stride + h * g.dq_head_stride;
#pragma unroll
  for (int m = 0; m < kCols; ++m) dq_row[part + kThreadsPerRow * m] = from_float<Element>(dq[m]);
}

}  // namespace tilegrid::attention::flash_bwd::simt
