#pragma once
// The portable attention backward's first kernel (internal):
//   delta_kernel: D_i = rowsum(dO_i * O_i) - dlse_i, one warp a query row,
// which the dK/dV and dQ kernels (flash_bwd_dkdv_kernel.cuh, flash_bwd_dq_kernel.cuh) read
// as dS = P * (dP - D).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/common/flash_bwd_params.h"
#include "attention/common/flash_bwd_rows.cuh"
#include "attention/common/sequence.h"

namespace tilegrid::attention::flash_bwd {

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
