// Turns a validated attention problem into the flash kernel's parameters and routes it to the
// translation unit of its head dimension.
#include <algorithm>
#include <limits>

#include "attention/attention_cuda.h"
#include "core/cuda_check.h"

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

}  // namespace

void forward_cuda(const Problem& p, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  const FlashFwdParams k = kernel_params(p);
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
