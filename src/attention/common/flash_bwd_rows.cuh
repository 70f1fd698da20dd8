#pragma once
// Row helpers of the attention backward (internal; the portable and the Hopper backward's
// row kernels): where a (sequence, head, token) row's lse and delta lie, and rowsum(dO * O).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/common/flash_bwd_params.h"
#include "attention/common/flash_fwd_params.h"

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

}  // namespace tilegrid::attention::flash_bwd
