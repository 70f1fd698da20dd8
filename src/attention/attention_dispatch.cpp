// Turns a validated attention problem into the flash kernel's parameters and routes it to the
// translation unit of its head dimension.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention_cuda.h"
#include "core/cuda_check.h"
#include "tilegrid/attention/attention.h"
#include "tilegrid/core/kernel_choice.h"
#include "tilegrid/core/tensor.h"
#if defined(TILEGRID_WITH_SM90_ATTENTION)
#include "attention/sm90/flash_bwd_sm90.h"
#include "attention/sm90/flash_fwd_sm90.h"
#endif

namespace tilegrid::attention {
namespace {

int as_int(int64_t x) {
  return int(std::min<int64_t>(x, std::numeric_limits<int>::max()));
}

FlashFwdParams kernel_params(const Problem& p) {
  FlashFwdParams k;
  k.q = p.q.data;
  k.k = p.k.data;
  k.v = p.v.data;
  k.out = p.out.data;
  k.lse = p.lse;
  k.q_batch_stride = p.q.batch_stride;
  k.q_row_stride = p.q.token_stride;
  k.q_head_stride = p.q.head_stride;
  k.k_batch_stride = p.k.batch_stride;
  k.k_row_stride = p.k.token_stride;
  k.k_head_stride = p.k.head_stride;
  k.v_batch_stride = p.v.batch_stride;
  k.v_row_stride = p.v.token_stride;
  k.v_head_stride = p.v.head_stride;
  k.out_batch_stride = p.out.batch_stride;
  k.out_row_stride = p.out.token_stride;
  k.out_head_stride = p.out.head_stride;
  k.lse_batch_stride = p.lse_batch_stride;
  k.lse_head_stride = p.lse_head_stride;
  k.cu_seqlens_q = p.cu_seqlens_q_device;
  k.cu_seqlens_k = p.cu_seqlens_k_device;
  if (p.batch > 0) {
    k.seqlen_q = as_int(p.q_len[0]);
    k.seqlen_k = as_int(p.k_len[0]);
  }
  k.max_seqlen_q = as_int(p.max_seqlen_q);
  k.batch = as_int(p.batch);
  k.heads_q = as_int(p.heads_q);
  k.group = as_int(p.heads_q / p.heads_kv);
  k.heads_kv = as_int(p.heads_kv);
  if (p.batch > 0) {
    k.rows_q = p.q_start.back() + p.q_len.back();
    k.rows_k = p.k_start.back() + p.k_len.back();
  }
  constexpr double kLog2e = 1.4426950408889634;
  if (p.softcap > 0) {
    k.softcap_scale = p.scale / p.softcap;
    k.score_scale_log2 = float(double(p.softcap) * kLog2e);
  } else {
    k.score_scale_log2 = float(double(p.scale) * kLog2e);
  }
  // A window wider than any sequence is no window; the clamp keeps the kernel's int64 bound
  // arithmetic (query index plus or minus the window) from overflowing.
  k.window_left = std::min<int64_t>(p.window_left, std::numeric_limits<int>::max());
  k.window_right = std::min<int64_t>(p.window_right, std::numeric_limits<int>::max());
  return k;
}

#if defined(TILEGRID_WITH_SM90_ATTENTION)
// Whether `auto` picks the Hopper kernel: only once its GPU tests have passed on an H200
// (bench/results/*_h200_attention_sm90_validation.txt); set it to false to fall back to the
// portable kernel everywhere while a change to the Hopper kernel is being proven.
constexpr bool kSm90ValidatedOnHardware = true;

// Whether the attention request and the device let the Hopper kernels run (before asking
// them whether they take the problem).
bool sm90_chosen(int device) {
  const KernelPath request = requested_kernel(KernelFamily::Attention);
  if (request == KernelPath::Portable) return false;
  if (request == KernelPath::Auto && !kSm90ValidatedOnHardware) return false;
  return hopper_kernels_run_on(KernelFamily::Attention, device);
}

// The Hopper kernel's switches for this call, or -1 to run the portable kernel.
int hopper_switches(const Problem& p, const FlashFwdParams& k, int device) {
  if (!sm90_chosen(device) || !sm90::supported(k, p.dtype, int(p.head_dim))) return -1;
  if (const int forced = sm90_switches(); forced >= 0) return forced;
  // A mask that ends rows early: causal (window_right 0) or any window.
  const bool masked = p.window_left >= 0 || p.window_right >= 0;
  return sm90::default_switches(int(p.head_dim), p.max_seqlen_q, masked);
}

// Whether the Hopper backward runs this call: as the forward (the attention request, the
// device, what the kernel supports), unless the attention_backward request is one of the
// portable kernels (portable, simt). deterministic=True runs it too, with its dQ additions
// taken in a fixed order (sm90/kernel/flash_bwd_sm90_kernel.cuh).
bool sm90_backward(const Problem& p, const FlashBwdParams& b, int device) {
  return requested_kernel(KernelFamily::AttentionBackward) == KernelPath::Auto &&
         sm90_chosen(device) && sm90::backward_supported(b, p.dtype, int(p.head_dim));
}
#endif

}  // namespace

void forward_cuda(const Problem& p, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  const FlashFwdParams k = kernel_params(p);
#if defined(TILEGRID_WITH_SM90_ATTENTION)
  if (const int switches = hopper_switches(p, k, device); switches >= 0) {
    set_last_cuda_kernel("sm90");
    return sm90::forward(k, p.dtype, int(p.head_dim), switches, stream);
  }
#endif
  set_last_cuda_kernel("portable");
  switch (p.head_dim) {
    case 64:
      return forward_cuda_hdim64(k, p.dtype, stream);
    case 96:
      return forward_cuda_hdim96(k, p.dtype, stream);
    case 128:
      return forward_cuda_hdim128(k, p.dtype, stream);
    case 192:
      return forward_cuda_hdim192(k, p.dtype, stream);
    default:
      return forward_cuda_hdim256(k, p.dtype, stream);
  }
}

void backward_cuda(const Problem& p, const Gradients& g, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  FlashBwdParams b;
  b.fwd = kernel_params(p);
  b.dout = g.dout.data;
  b.dout_batch_stride = g.dout.batch_stride;
  b.dout_row_stride = g.dout.token_stride;
  b.dout_head_stride = g.dout.head_stride;
  b.dq = g.dq.data;
  b.dq_batch_stride = g.dq.batch_stride;
  b.dq_row_stride = g.dq.token_stride;
  b.dq_head_stride = g.dq.head_stride;
  b.dk = g.dk.data;
  b.dv = g.dv.data;  // dk and dv: contiguous with one shape, so one set of strides
  b.dk_batch_stride = g.dk.batch_stride;
  b.dk_row_stride = g.dk.token_stride;
  b.dk_head_stride = g.dk.head_stride;
  b.dlse = g.dlse;
  b.scale = p.scale;
  b.softcap = p.softcap;
  const int64_t max_seqlen_k =
      p.k_len.empty() ? 0 : *std::max_element(p.k_len.begin(), p.k_len.end());
  // The row deltas take lse's layout: [batch, heads_q, seqlen_q] or [heads_q, total_q].
  const int64_t rows = p.lse_batch_stride > 0 ? p.lse_batch_stride * p.batch
                                              : p.lse_head_stride * p.heads_q;
#if defined(TILEGRID_WITH_SM90_ATTENTION)
  if (sm90_backward(p, b, device)) {
    const int64_t padded = sm90::backward_rows(b.fwd, int(p.head_dim)) * p.heads_q;
    const Device on = Device::cuda(device);
    Tensor lse_log2 = Tensor::empty({padded}, DType::Float32, on, stream);
    Tensor row_delta = Tensor::empty({padded}, DType::Float32, on, stream);
    Tensor dq_accum = Tensor::empty({padded * sm90::dq_row_floats(int(p.head_dim))},
                                    DType::Float32, on, stream);
    Tensor dq_order;  // counters that order the dQ additions (deterministic=True)
    if (g.deterministic)
      dq_order = Tensor::empty({sm90::backward_dq_order_counters(b.fwd, int(p.head_dim))},
                               DType::Int32, on, stream);
    set_last_cuda_kernel(g.deterministic ? "sm90 deterministic" : "sm90");
    return sm90::backward(b,
                          {static_cast<float*>(lse_log2.data()),
                           static_cast<float*>(row_delta.data()),
                           static_cast<float*>(dq_accum.data()),
                           g.deterministic ? static_cast<int*>(dq_order.data()) : nullptr},
                          p.dtype, int(p.head_dim), as_int(max_seqlen_k), stream);
  }
#endif
  Tensor delta = Tensor::empty({std::max<int64_t>(rows, 1)}, DType::Float32,
                               Device::cuda(device), stream);
  b.delta = static_cast<float*>(delta.data());
  set_last_cuda_kernel("portable");
  const int keys = as_int(max_seqlen_k);
  switch (p.head_dim) {
    case 64:
      return backward_cuda_hdim64(b, p.dtype, keys, stream);
    case 96:
      return backward_cuda_hdim96(b, p.dtype, keys, stream);
    case 128:
      return backward_cuda_hdim128(b, p.dtype, keys, stream);
    case 192:
      return backward_cuda_hdim192(b, p.dtype, keys, stream);
    default:
      return backward_cuda_hdim256(b, p.dtype, keys, stream);
  }
}

std::vector<int64_t> offsets_to_host(const int32_t* device_offsets, int64_t count, int device,
                                     Stream stream) {
  CudaDeviceGuard guard(device);
  std::vector<int32_t> host(static_cast<size_t>(count));
  auto s = static_cast<cudaStream_t>(stream.handle);
  TG_CUDA_CHECK(cudaMemcpyAsync(host.data(), device_offsets, sizeof(int32_t) * host.size(),
                                cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  return {host.begin(), host.end()};
}

}  // namespace tilegrid::attention
