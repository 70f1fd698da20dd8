#pragma once
// What the backward kernels read (internal; portable and Hopper): the forward's parameters
// (q, k, v, out, lse, lengths, mask, scale) plus dout, the gradients and the row deltas.
// Strides in elements; last dimensions contiguous. dq, dk and dv have the strides of q, k and
// v's contiguous layouts (the front end allocates or checks them so).
#include <cstdint>

#include "attention/common/flash_fwd_params.h"

namespace tilegrid::attention {

struct FlashBwdParams {
  FlashFwdParams fwd;  // lse is read, out is read (not written)
  const void* dout = nullptr;
  int64_t dout_batch_stride = 0, dout_row_stride = 0, dout_head_stride = 0;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;  // dv: the same
  const float* dlse = nullptr;                                         // lse's layout, or null
  float* delta = nullptr;  // lse's layout: rowsum(dout * out) - dlse, written first
  float scale = 0;         // softmax scale (the natural-log units the gradients need)
  float softcap = 0;       // 0: none
};

}  // namespace tilegrid::attention
