#pragma once
// Exact attention, O = softmax(scale * Q K^T + mask) V, with FlashAttention's conventions:
// tensors are (batch, seqlen, heads, head_dim) or, for variable-length batches,
// (total_tokens, heads, head_dim) with cumulative sequence offsets; heads of q are a multiple
// of heads of k/v (GQA/MQA); causal masks align the last query with the last key (bottom
// right) when seqlen_q != seqlen_k; windows are (left, right) in keys around that diagonal;
// softcap applies softcap * tanh(s / softcap) to the scaled scores. A query that sees no key
// gets output 0 and log-sum-exp -inf. A NaN among a query's scores (a NaN in q or in a key it
// sees, or +inf, whose softmax is inf / inf) makes its output row and log-sum-exp NaN, as in
// torch's scaled_dot_product_attention (math backend); keys outside a query's window are never
// read, as in FlashAttention, so their values do not reach it.
//
// CPU tensors run the reference (float32 math, float64 sums). CUDA tensors (float16 and
// bfloat16 only; data 16-byte aligned, strides multiples of 8 elements) run a portable
// FlashAttention-2-style kernel on sm_80 and newer, or on compute capability 9.0 the Hopper
// kernel (TMA + wgmma; head dimensions 64, 128 and 256) where it is selected (see below).
// On CUDA, forward_varlen copies cu_seqlens (on q's device) to the host to validate them,
// which waits for `stream`.
#include <cstdint>
#include <optional>
#include <vector>

#include "tilegrid/core/tensor_view.h"

namespace tilegrid::attention {

// softmax_scale: unset means 1 / sqrt(head_dim); else any value finite in float32, the type
// the scores are scaled in: 0 weighs every visible key alike, and a negative scale is taken as
// FlashAttention takes it (any float). Without softcap the CUDA kernels need a scale > 0 (they
// take each row's maximum of the unscaled scores); tilegrid.flash_attn_func passes -q and
// -scale for a negative scale and 0 * q for 0. A window of at least seqlen_q + seqlen_k keys
// (of the longest sequence) reaches past both ends of every sequence: it is taken as -1.
struct Params {
  std::optional<double> softmax_scale;
  bool causal = false;        // same as window_right = 0
  int64_t window_left = -1;   // keys allowed before the diagonal; -1: all
  int64_t window_right = -1;  // keys allowed after the diagonal; -1: all
  double softcap = 0;         // 0: off; else finite in float32
};

// Which CUDA kernels run, forward and backward, is the attention family's request
// (tilegrid/core/kernel_choice.h: TILEGRID_ATTENTION_KERNEL, or set_kernel_choice):
//  - auto and sm90: the Hopper kernels where hopper_kernels_run_on (compute capability 9.0)
//    for the problems they support (16-bit types, head dimension 64, 128 or 256, strides
//    multiples of 8 elements), the portable kernels for everything else - never an error
//    (auto alone also yields to the dispatcher's kSm90ValidatedOnHardware, true in this
//    version);
//  - portable: always the portable kernels.
// The backward also takes TILEGRID_ATTENTION_BACKWARD (see backward below).

// The variant of the Hopper forward, for this process (tests, benchmarks): bit 0: conditional
// rescaling, bit 1: software exp2, bit 2: ping-pong between the consumer warpgroups, bit 3:
// three consumer warpgroups (head dim 64), bit 4: wider key tiles (176 at head dim 128, 80 at
// 256), bits 3-4 without bits 0-1 only; bit 5: persistent CTAs looping over tiles; bit 6, with
// bit 5: each CTA takes the next untaken tile (dynamic tiles); bit 7: clusters of two CTAs
// sharing K/V loads (head dims 128 and 256, bfloat16, without a mask; see flash_fwd_sm90.h);
// bit 9: the output from registers where the kernel would store it by TMA (for comparison);
// -1 (the initial value): the default, the fastest measured, which depends on the head dim,
// the longest query sequence and the mask. bfloat16 has every combination of bits 0-1,
// float16 the default's only.
void set_sm90_switches(int sm90_switches);

// The head dimensions whose kernels run on `device`, the ones tilegrid.flash_attn_func pads a
// head dim up to: 64, 128 and 256 on a device where the Hopper kernels run
// (hopper_kernels_run_on; 96 and 192 are padded there whatever path is requested), else 64,
// 96, 128, 192 and 256 (the CPU included).
std::vector<int> kernel_head_dims(Device device);

// The kernel that ran the latest CUDA call of this thread: "sm90", "sm90 deterministic" (the
// backward with deterministic=true), "portable" or "" (none yet).
const char* last_cuda_kernel();

// q [b, sq, hq, d], k and v [b, sk, hk, d] (float16, bfloat16 or float32; one dtype), last
// dimension contiguous; d in {64, 96, 128, 192, 256}, one d for q, k and v. out: like q,
// contiguous. lse (optional): float32 [b, hq, sq], natural-log log-sum-exp of each query's scaled
// scores.
void forward(const TensorView& q, const TensorView& k, const TensorView& v, const Params& params,
             const TensorView& out, const std::optional<TensorView>& lse, Stream stream = {});

// q [total_q, hq, d], k and v [total_k, hk, d]; cu_seqlens_q / cu_seqlens_k int32 [b+1] on
// q's device (from 0, non-decreasing, ending at total_q / total_k; zero-length sequences allowed);
// max_seqlen_q / max_seqlen_k at least the longest sequence. lse: float32 [hq, total_q].
void forward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                    int64_t max_seqlen_q, int64_t max_seqlen_k, const Params& params,
                    const TensorView& out, const std::optional<TensorView>& lse,
                    Stream stream = {});

// Gradients of forward(), as FlashAttention's backward takes them: dout like out (last
// dimension contiguous), the forward's out and lse (required), and dq, dk, dv like q, k and v
// (contiguous), which are overwritten. dlse (optional, float32 like lse): the gradient of lse
// too, for callers that use it (ring attention merges partial results by their lse); as
// d lse / d s = P, it enters as dS = P * (dP - rowsum(dO * O) + dlse). Queries that see no
// key, and keys that no query sees, get zero gradients. deterministic: the same bits on every
// run with the same inputs. CPU tensors run the reference (float64 sums; always
// deterministic). CUDA tensors, where the attention request picks the Hopper kernels (head
// dims 64 and 128: sm90/flash_bwd_sm90_kernel.cuh; 256: sm90/flash_bwd_sm90_wide_kernel.cuh),
// sum dQ in float32 by bulk additions whose order varies between runs, or in a fixed order
// with deterministic; their scratch (lse in log2 units, row deltas, the dQ sums and, with
// deterministic, the order counters) comes from the device's allocator. The
// attention_backward request portable or simt (TILEGRID_ATTENTION_BACKWARD, or
// set_kernel_choice) forces the portable kernels, which run anyway where the Hopper ones do
// not: a tensor-core kernel (mma.sync, sm_80 and newer; see cuda/flash_bwd_dkdv_kernel.cuh and
// cuda/flash_bwd_dq_kernel.cuh; up to 165 KB of shared memory a block), or the CUDA-core one
// (cuda/flash_bwd_simt.cuh) on GPUs with less or with the request simt, both deterministic,
// with a scratch buffer of one float per query row and head from the device's allocator.
void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
              const TensorView& out, const TensorView& lse, const std::optional<TensorView>& dlse,
              const Params& params, const TensorView& dq, const TensorView& dk,
              const TensorView& dv, bool deterministic = false, Stream stream = {});

// The variable-length form: shapes and offsets as in forward_varlen, lse [hq, total_q].
void backward_varlen(const TensorView& dout, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& out, const TensorView& lse,
                     const std::optional<TensorView>& dlse, const TensorView& cu_seqlens_q,
                     const TensorView& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                     const Params& params, const TensorView& dq, const TensorView& dk,
                     const TensorView& dv, bool deterministic = false, Stream stream = {});

}  // namespace tilegrid::attention
