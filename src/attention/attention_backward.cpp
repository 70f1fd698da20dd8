// Attention backward front end: the forward's checks (shared Problem builders) plus those of
// dout and the gradients, then the CPU reference or the CUDA kernels.
#include <cstdint>
#include <optional>

#include "attention/attention_problem.h"
#include "attention/attention_validate.h"
#include "tilegrid/attention/attention.h"
#include "tilegrid/core/checks.h"
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
#include "attention/attention_cuda.h"
#endif

namespace tilegrid::attention {
namespace {

Gradients gradients(const char* op, const TensorView& dout, const TensorView& q,
                    const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const std::optional<TensorView>& dlse,
                    const TensorView& dq, const TensorView& dk, const TensorView& dv,
                    bool deterministic, bool varlen) {
  check_same_device(op, "dout", dout, "q", q);
  check_dtype(op, "dout", dout, {q.dtype});
  check_shape(op, "dout", dout, out.shape);
  check_last_dim_contiguous(op, "dout", dout);
  check_data(op, "dout", dout);
  check_like(op, "dq", dq, "q", q);
  check_like(op, "dk", dk, "k", k);
  check_like(op, "dv", dv, "v", v);
  if (dlse) check_like(op, "dlse", *dlse, "lse", lse);
  Gradients g;
  g.dout = operand(dout, varlen);
  g.dq = operand(dq, varlen);
  g.dk = operand(dk, varlen);
  g.dv = operand(dv, varlen);
  g.dlse = dlse ? dlse->data_ptr<const float>() : nullptr;
  g.deterministic = deterministic;
  return g;
}

void run_backward(const char* op, const Problem& p, const Gradients& g, const TensorView& q,
                  std::initializer_list<Named> cuda_tensors, Stream stream) {
  if (q.device.is_cpu()) return backward_cpu(p, g);
  check_cuda_problem(op, p, cuda_tensors);
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
  TG_CHECK_VALUE(p.batch <= 65535, op, ": at most 65535 sequences on CUDA, got ", p.batch);
  backward_cuda(p, g, q.device.index, stream);
#else
  (void)stream;
  throw Error(detail::concat(op, ": attention on ", q.device,
                             " needs the CUDA kernels, which this build of tilegrid lacks "
                             "(built without CUDA, or without the CUTLASS/CuTe headers)"));
#endif
}

}  // namespace

void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
              const TensorView& out, const TensorView& lse, const std::optional<TensorView>& dlse,
              const Params& params, const TensorView& dq, const TensorView& dk,
              const TensorView& dv, bool deterministic, Stream stream) {
  constexpr const char* kOp = "flash_attn_func backward";
  const Problem p = dense_problem(kOp, q, k, v, out, lse, params);
  const Gradients g =
      gradients(kOp, dout, q, k, v, out, lse, dlse, dq, dk, dv, deterministic, false);
  run_backward(kOp, p, g, q,
               {{"q", &q},
                {"k", &k},
                {"v", &v},
                {"out", &out},
                {"dout", &dout},
                {"dq", &dq},
                {"dk", &dk},
                {"dv", &dv}},
               stream);
}

void backward_varlen(const TensorView& dout, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& out, const TensorView& lse,
                     const std::optional<TensorView>& dlse, const TensorView& cu_seqlens_q,
                     const TensorView& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                     const Params& params, const TensorView& dq, const TensorView& dk,
                     const TensorView& dv, bool deterministic, Stream stream) {
  constexpr const char* kOp = "flash_attn_varlen_func backward";
  const Problem p = varlen_problem(kOp, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, out, lse, params, stream);
  const Gradients g =
      gradients(kOp, dout, q, k, v, out, lse, dlse, dq, dk, dv, deterministic, true);
  run_backward(kOp, p, g, q,
               {{"q", &q},
                {"k", &k},
                {"v", &v},
                {"out", &out},
                {"dout", &dout},
                {"dq", &dq},
                {"dk", &dk},
                {"dv", &dv}},
               stream);
}

}  // namespace tilegrid::attention
