// Attention front end: validates every argument as FlashAttention's users expect, builds the
// Problem, and dispatches to the CPU reference or the CUDA kernels.
#include "tilegrid/attention/attention.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <vector>

#include "attention/attention_problem.h"
#include "attention/attention_validate.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/kernel_choice.h"
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

std::atomic<int> g_sm90_switches{-1};

thread_local const char* last_kernel = "";

}  // namespace

int sm90_switches() {
  return g_sm90_switches.load(std::memory_order_relaxed);
}

void set_sm90_switches(int switches) {
  g_sm90_switches.store(switches, std::memory_order_relaxed);
}

std::vector<int> kernel_head_dims(Device device) {
  if (device.is_cuda() && hopper_kernels_run_on(KernelFamily::Attention, device.index))
    return {std::begin(kHopperHeadDims), std::end(kHopperHeadDims)};
  return {std::begin(kHeadDims), std::end(kHeadDims)};
}

void set_last_cuda_kernel(const char* name) {
  last_kernel = name;
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
