#pragma once
// CUDA back end of attention (internal).
#include <cstdint>
#include <vector>

#include "attention/attention_problem.h"
#include "attention/common/flash_bwd_params.h"
#include "attention/common/flash_fwd_params.h"
#include "attention/cuda/flash_decode_params.h"
#include "tilegrid/core/device.h"
#include "tilegrid/core/dtype.h"

namespace tilegrid::attention {

// Runs a validated problem (float16 or bfloat16) on the current device's `stream`.
void forward_cuda(const Problem& p, int device, Stream stream);

// The gradients of a validated problem: the portable tensor-core backward
// (cuda/flash_bwd_dkdv_kernel.cuh, cuda/flash_bwd_dq_kernel.cuh) on every GPU for now, the
// CUDA-core one (cuda/flash_bwd_simt.cuh) where the shared memory is too small for it; its row
// deltas in a scratch buffer from the device's allocator.
void backward_cuda(const Problem& p, const Gradients& g, int device, Stream stream);

// Copies int32 offsets from device memory to the host for validation; waits on `stream`.
std::vector<int64_t> offsets_to_host(const int32_t* device_offsets, int64_t count, int device,
                                     Stream stream);

// One per head dimension, each in its own translation unit (cuda/flash_fwd_hdim<d>.cu).
void forward_cuda_hdim64(const FlashFwdParams& p, DType dtype, Stream stream);
void forward_cuda_hdim96(const FlashFwdParams& p, DType dtype, Stream stream);
void forward_cuda_hdim128(const FlashFwdParams& p, DType dtype, Stream stream);
void forward_cuda_hdim192(const FlashFwdParams& p, DType dtype, Stream stream);
void forward_cuda_hdim256(const FlashFwdParams& p, DType dtype, Stream stream);

// Attention over a KV cache read in place, one per head dimension
// (cuda/flash_decode_hdim<d>.cu); with p.num_splits > 1, p.partial_out, p.partial_max and
// p.partial_sum are the caller's scratch.
void decode_cuda_hdim64(const FlashDecodeParams& p, DType dtype, Stream stream);
void decode_cuda_hdim128(const FlashDecodeParams& p, DType dtype, Stream stream);
void decode_cuda_hdim256(const FlashDecodeParams& p, DType dtype, Stream stream);

// One per head dimension, each in its own translation unit (cuda/flash_bwd_hdim<d>.cu).
void backward_cuda_hdim64(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream);
void backward_cuda_hdim96(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream);
void backward_cuda_hdim128(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream);
void backward_cuda_hdim192(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream);
void backward_cuda_hdim256(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream);

}  // namespace tilegrid::attention
