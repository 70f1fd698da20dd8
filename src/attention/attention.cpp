// Attention front end: validates every argument as FlashAttention's users expect, builds the
// Problem, and dispatches to the CPU reference or the CUDA kernels.
#include "tilegrid/attention/attention.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attention/attention_problem.h"
#include "attention/attention_validate.h"
#include "tilegrid/core/checks.h"
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
#include "attention/attention_cuda.h"
#endif

namespace tilegrid::attention {
namespace {

void run(const char* op, const Problem& p, Device device, Stream stream) {
  if (device.is_cpu()) return forward_cpu(p);
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
  TG_CHECK_VALUE(p.batch <= 65535, op, ": at most 65535 sequences on CUDA, got ", p.batch);
  forward_cuda(p, device.index, stream);
#else
  (void)p;
  (void)stream;
  throw Error(detail::concat(op, ": attention on ", device,
                             " needs the CUDA kernels, which this build of tilegrid lacks "
                             "(built without CUDA, or without the CUTLASS/CuTe headers)"));
#endif
}

// The kernel selection: the environment variable once, then set_cuda_kernel's overrides.
struct KernelSetting {
  std::atomic<int> kernel{int(CudaKernel::Auto)};
  std::atomic<int> sm90_switches{-1};
};

KernelSetting& kernel_setting() {
  static KernelSetting* setting = [] {
    auto* s = new KernelSetting;
    const char* env = std::getenv("TILEGRID_ATTENTION_KERNEL");
    const std::string value = env == nullptr ? "" : env;
    if (value == "sm90")
      s->kernel = int(CudaKernel::Sm90);
    else if (value == "portable")
      s->kernel = int(CudaKernel::Portable);
    else
      TG_CHECK_VALUE(value.empty() || value == "auto",
                     "TILEGRID_ATTENTION_KERNEL must be auto, sm90 or portable, got '", value, "'");
    return s;
  }();
  return *setting;
}

thread_local const char* last_kernel = "";

}  // namespace

KernelChoice kernel_choice() {
  KernelSetting& s = kernel_setting();
  return {s.kernel.load(), s.sm90_switches.load()};
}

void set_last_cuda_kernel(const char* name) {
  last_kernel = name;
}

void set_cuda_kernel(CudaKernel kernel, int sm90_switches) {
  KernelSetting& s = kernel_setting();
  s.kernel = int(kernel);
  s.sm90_switches = sm90_switches;
}

const char* last_cuda_kernel() {
  return last_kernel;
}

void forward(const TensorView& q, const TensorView& k, const TensorView& v, const Params& params,
             const TensorView& out, const std::optional<TensorView>& lse, Stream stream) {
  constexpr const char* kOp = "flash_attn_func";
  const Problem p = dense_problem(kOp, q, k, v, out, lse, params);
  if (!q.device.is_cpu())
    check_cuda_problem(kOp, p, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  run(kOp, p, q.device, stream);
}

void forward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                    int64_t max_seqlen_q, int64_t max_seqlen_k, const Params& params,
                    const TensorView& out, const std::optional<TensorView>& lse, Stream stream) {
  constexpr const char* kOp = "flash_attn_varlen_func";
  const Problem p = varlen_problem(kOp, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, out, lse, params, stream);
  if (!q.device.is_cpu())
    check_cuda_problem(kOp, p, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  run(kOp, p, q.device, stream);
}

}  // namespace tilegrid::attention
