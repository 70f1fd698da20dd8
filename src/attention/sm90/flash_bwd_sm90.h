#pragma once
// The Hopper flash attention backward (internal, sm_90a only; see
// kernel/flash_bwd_sm90_kernel.cuh).
// The dispatcher asks `backward_supported` first and runs the portable backward for
// everything else (other head dims, strides TMA cannot take).
#include <cstdint>

#include "attention/common/flash_bwd_params.h"
#include "tilegrid/core/device.h"
#include "tilegrid/core/dtype.h"

namespace tilegrid::attention::sm90 {

// float16 / bfloat16, head dimension 64, 128 or 256, every stride of q, k, v and dout a multiple
// of 8 elements (TMA's 16-byte global strides), token extents below 2^31. The caller checks
// the device (compute capability 9.0).
bool backward_supported(const FlashBwdParams& g, DType dtype, int head_dim);

// The float32 buffers the kernels share, [heads_q, backward_rows(...)] each (dq_accum with
// dq_row_floats(head_dim) floats a row: flash_bwd_sm90_rows.h, DqTileLayout); the caller
// allocates them on the call's device and stream.
int64_t backward_rows(const FlashFwdParams& p, int head_dim);
int dq_row_floats(int head_dim);
// deterministic=True: int32 counters that order the additions into dQ, one a query tile.
int64_t backward_dq_order_counters(const FlashFwdParams& p, int head_dim);
struct BackwardWorkspace {
  float* lse_log2 = nullptr;
  float* delta = nullptr;
  float* dq_accum = nullptr;
  int* dq_order = nullptr;  // deterministic=True only; nullptr adds in any order
};

// Preprocess, main kernel, postprocess on one stream; max_seqlen_k sizes the grid.
void backward(const FlashBwdParams& g, const BackwardWorkspace& ws, DType dtype, int head_dim,
              int max_seqlen_k, Stream stream);

// One per head dimension, each in its own translation unit (flash_bwd_sm90_hdim<d>.cu).
void backward_hdim64(const FlashBwdParams& g, const BackwardWorkspace& ws, DType dtype,
                     int max_seqlen_k, Stream stream);
void backward_hdim128(const FlashBwdParams& g, const BackwardWorkspace& ws, DType dtype,
                      int max_seqlen_k, Stream stream);
void backward_hdim256(const FlashBwdParams& g, const BackwardWorkspace& ws, DType dtype,
                      int max_seqlen_k, Stream stream);

}  // namespace tilegrid::attention::sm90
