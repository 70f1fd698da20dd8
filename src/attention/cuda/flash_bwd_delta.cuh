#pragma once
// The portable attention backward's first kernel and what its kernels share (internal):
// where a sequence's lse rows are (where the sequence lies: common/sequence.h), and
//   delta_kernel: D_i = rowsum(dO_i * O_i) - dlse_i, one warp a query row,
// which the dK/dV and dQ kernels (flash_bwd_dkdv_kernel.cuh, flash_bwd_dq_kernel.cuh) read
// as dS = P * (dP - D).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/common/sequence.h"
#include "attention/cuda/flash_bwd_params.h"

namespace tilegrid::attention::flash_bwd {

// Index of (batch b, head h, token) in lse's layout (and in delta's, which is the same).
__device__ __forceinline__ int64_t lse_index(const FlashFwdParams& p, int b, int h, int64_t token) {
  return b * p.lse_batch_stride + h * p.lse_head_stride + token;
}

// rowsum(dO * O) of one (sequence b, head h, token) row, by the 32 lanes of a warp; every
// lane gets the sum.
template <class Element, int kHeadDim>
__device__ __forceinline__ float out_dout_rowsum(const FlashBwdParams& g, int b, int h,
                                                 int64_t token, int lane) {
  const FlashFwdParams& p = g.fwd;
  const auto* out = static_cast<const Element*>(p.out) + b * p.out_batch_stride +
                    token * p.out_row_stride + h * p.out_head_stride;
  const auto* dout = static_cast<const Element*>(g.dout) + b * g.dout_batch_stride +
                     token * g.dout_row_stride + h * g.dout_head_stride;
  float sum = 0.f;
  for (int c = lane; c < kHeadDim; c += 32) sum += float(out[c]) * float(dout[c]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  return sum;
}

constexpr int kDeltaRowsPerBlock = 8;  // one warp a row, 256 threads

// Grid (ceil(max_seqlen_q / 8), heads_q, batch). Element: cutlass::half_t or bfloat16_t.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(32 * kDeltaRowsPerBlock) delta_kernel(const FlashBwdParams g) {
  const FlashFwdParams& p = g.fwd;
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x % 32;
  const Sequence seq = sequence(p, b);
  const int64_t i = int64_t(blockIdx.x) * kDeltaRowsPerBlock + threadIdx.x / 32;
  if (i >= seq.sq) return;
  const int64_t token = seq.q0 + i;
  const float sum = out_dout_rowsum<Element, kHeadDim>(g, b, h, token, lane);
  if (lane == 0) {
    const int64_t at = lse_index(p, b, h, token);
    g.delta[at] = sum - (g.dlse != nullptr ? g.dlse[at] : 0.f);
  }
}

}  // namespace tilegrid::attention::flash_bwd
