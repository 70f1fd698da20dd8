// Argument checks and the Problem builders shared by the forward and backward entry points.
#include "attention/attention_validate.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "tilegrid/core/checks.h"
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
#include "attention/attention_cuda.h"
#endif

namespace tilegrid::attention {
namespace {

void check_qkv(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
               int ndim) {
  check_dtype(op, "q", q, {DType::Float16, DType::BFloat16, DType::Float32});
  check_dtype(op, "k", k, {q.dtype});
  check_dtype(op, "v", v, {q.dtype});
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}}) {
    check_ndim(op, name, *t, ndim);
    check_last_dim_contiguous(op, name, *t);
    check_data(op, name, *t);
    if (t != &q) check_same_device(op, name, *t, "q", q);
  }
  // One head dimension for all three, checked before the supported ones, so that a mismatch
  // is not blamed on q alone.
  const int64_t d = q.size(-1);
  TG_CHECK_VALUE(k.size(-1) == d, op, ": q and k must have the same head dimension, got q's ", d,
                 " (q shape ", q.shape, ") and k's ", k.size(-1), " (k shape ", k.shape, ")");
  TG_CHECK_VALUE(v.size(-1) == d, op, ": v's head dimension must equal q's and k's (", d,
                 "; the kernels have no head dimension of v's own), got ", v.size(-1), " (v shape ",
                 v.shape, ")");
  bool supported = false;
  for (int hd : kHeadDims) supported = supported || d == hd;
  TG_CHECK_VALUE(supported, op, ": head dimension must be 64, 96, 128, 192 or 256, got ", d,
                 " (q shape ", q.shape, ")");
  TG_CHECK_VALUE(k.shape == v.shape, op, ": k and v must have the same shape, got ", k.shape,
                 " and ", v.shape);
  const int64_t hq = q.size(-2), hk = k.size(-2);
  TG_CHECK_VALUE(hk >= 1 && hq % hk == 0, op, ": heads of q (", hq,
                 ") must be a multiple of heads of k and v (", hk, ")");
}

// The scores are scaled in float32: a value past its range would scale them to inf or NaN.
bool finite_in_float32(double x) {
  return std::fabs(x) <= double(std::numeric_limits<float>::max());
}


void fill_common(Problem& p, const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& out, const Params& params, bool varlen) {
  p.dtype = q.dtype;
  p.heads_q = q.size(-2);
  p.heads_kv = k.size(-2);
  p.head_dim = q.size(-1);
  p.q = operand(q, varlen);
  p.k = operand(k, varlen);
  p.v = operand(v, varlen);
  p.out = operand(out, varlen);
  p.scale = float(params.softmax_scale.value_or(1.0 / std::sqrt(double(p.head_dim))));
  p.softcap = float(params.softcap);
  p.window_left = params.window_left;
  p.window_right = params.causal ? 0 : params.window_right;
}

// A window of seqlen_q + seqlen_k keys or more reaches past both ends of the sequence from
// every diagonal (query i's is key i + seqlen_k - seqlen_q), so it is no window: -1, as
// FlashAttention writes it. The mask's bound arithmetic (diagonal -/+ window) then stays far
// from int64's limits for every back end, forward and backward.
void clamp_windows(Problem& p) {
  int64_t reach = 0;
  for (size_t b = 0; b < p.q_len.size(); ++b) reach = std::max(reach, p.q_len[b] + p.k_len[b]);
  if (p.window_left >= reach) p.window_left = -1;
  if (p.window_right >= reach) p.window_right = -1;
}

// Offsets validated on the host (from 0, non-decreasing, ending at `total`).
std::vector<int64_t> host_offsets(const char* op, const char* name, const TensorView& cu,
                                  int64_t total, const TensorView& q, Stream stream) {
  check_dtype(op, name, cu, {DType::Int32});
  check_ndim(op, name, cu, 1);
  check_contiguous(op, name, cu);
  check_data(op, name, cu);
  check_same_device(op, name, cu, "q", q);
  TG_CHECK_VALUE(cu.size(0) >= 1, op, ": ", name, " must have batch+1 >= 1 entries");
  std::vector<int64_t> out;
  if (cu.device.is_cpu()) {
    const int32_t* c = cu.data_ptr<const int32_t>();
    out.assign(c, c + cu.size(0));
  } else {
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
    // Validated on the host before any kernel runs; this waits for the stream.
    out = offsets_to_host(cu.data_ptr<const int32_t>(), cu.size(0), cu.device.index, stream);
#else
    (void)stream;
    throw Error(detail::concat(op, ": ", name, " on ", cu.device,
                               ": this build of tilegrid has no CUDA attention kernels"));
#endif
  }
  TG_CHECK_VALUE(out.front() == 0, op, ": ", name, "[0] must be 0, got ", out.front());
  for (size_t b = 1; b < out.size(); ++b)
    TG_CHECK_VALUE(out[b] >= out[b - 1], op, ": ", name, " must be non-decreasing, got ", name, "[",
                   b - 1, "] = ", out[b - 1], " > ", name, "[", b, "] = ", out[b]);
  TG_CHECK_VALUE(out.back() == total, op, ": ", name, "[-1] must equal the number of tokens (",
                 total, "), got ", out.back());
  return out;
}

}  // namespace

void check_params(const char* op, const Params& p) {
  if (p.softmax_scale)
    TG_CHECK_VALUE(finite_in_float32(*p.softmax_scale), op,
                   ": softmax_scale must be finite in float32 (|scale| <= 3.4e38), got ",
                   *p.softmax_scale);
  TG_CHECK_VALUE(finite_in_float32(p.softcap) && p.softcap >= 0, op,
                 ": softcap must be >= 0 and finite in float32, got ", p.softcap);
  TG_CHECK_VALUE(p.window_left >= -1 && p.window_right >= -1, op,
                 ": window sizes must be >= -1 (-1: unbounded), got (", p.window_left, ", ",
                 p.window_right, ")");
}

void check_like(const char* op, const char* name, const TensorView& t, const char* ref_name,
                const TensorView& ref) {
  check_same_device(op, name, t, ref_name, ref);
  check_dtype(op, name, t, {ref.dtype});
  check_shape(op, name, t, ref.shape);
  check_contiguous(op, name, t);
}

Operand operand(const TensorView& t, bool varlen) {
  return {t.data, varlen ? 0 : t.stride(0), t.stride(-3), t.stride(-2)};
}

void check_row_loads(const char* op, const char* name, const TensorView& t) {
  bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  for (int i = 0; i + 1 < t.ndim(); ++i) aligned = aligned && (t.stride(i) % 8 == 0 || t.size(i) == 1);
  TG_CHECK_VALUE(aligned, op, ": on CUDA, ", name,
                 " must start 16-byte aligned and have strides that are multiples of 8 "
                 "elements (16-byte row loads), got strides ",
                 t.strides);
}

// 16-bit types and 16-byte row loads (cp.async, TMA); scores the kernels can scale.
void check_cuda_problem(const char* op, const Problem& p, std::initializer_list<Named> tensors) {
  // Without softcap the kernels keep each row's maximum of the unscaled scores and scale it,
  // which is the maximum of the scaled ones only for a scale > 0 (with a scale of 0, a masked
  // score, -inf, would scale to NaN). With softcap the scores are scaled before the maximum.
  constexpr double kLog2e = 1.4426950408889634;
  const double log2_factor = double(p.softcap > 0 ? p.softcap : p.scale) * kLog2e;
  TG_CHECK_VALUE(p.softcap > 0 || p.scale > 0, op,
                 ": on CUDA without softcap, softmax_scale must be > 0, got ", p.scale,
                 " (the kernels take each row's maximum before scaling; for a scale s <= 0 pass "
                 "-q and -s, or 0 * q and 1, as tilegrid.flash_attn_func does)");
  TG_CHECK_VALUE(finite_in_float32(log2_factor), op, ": on CUDA the scores are scaled by ",
                 p.softcap > 0 ? "softcap" : "softmax_scale",
                 " * log2(e) in float32, which overflows for ",
                 p.softcap > 0 ? p.softcap : p.scale);
  const TensorView& q = *tensors.begin()->second;
  TG_CHECK_TYPE(q.dtype == DType::Float16 || q.dtype == DType::BFloat16, op,
                ": on CUDA, q, k and v must be float16 or bfloat16 (float32 runs on the CPU "
                "only), got ",
                q.dtype);
  for (auto [name, t] : tensors) check_row_loads(op, name, *t);
  // Grid: query tiles x heads x sequences; sequence lengths in int.
  const TensorView& k = *(tensors.begin() + 1)->second;
  TG_CHECK_VALUE(q.size(-2) <= 65535, op, ": at most 65535 heads of q on CUDA, got ", q.size(-2));
  TG_CHECK_VALUE(q.size(-3) <= INT32_MAX && k.size(-3) <= INT32_MAX, op,
                 ": sequences longer than 2^31 - 1 tokens are not supported");
}

Problem dense_problem(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const std::optional<TensorView>& lse,
                      const Params& params) {
  check_qkv(op, q, k, v, 4);
  TG_CHECK_VALUE(k.size(0) == q.size(0), op, ": batch of k (", k.size(0), ") must equal q's (",
                 q.size(0), ")");
  check_params(op, params);
  check_like(op, "out", out, "q", q);
  const int64_t batch = q.size(0), sq = q.size(1), sk = k.size(1), hq = q.size(2);
  if (lse) {
    check_same_device(op, "lse", *lse, "q", q);
    check_dtype(op, "lse", *lse, {DType::Float32});
    check_shape(op, "lse", *lse, {batch, hq, sq});
    check_contiguous(op, "lse", *lse);
  }
  Problem p;
  p.batch = batch;
  fill_common(p, q, k, v, out, params, false);
  p.q_start.assign(size_t(batch), 0);
  p.k_start.assign(size_t(batch), 0);
  p.q_len.assign(size_t(batch), sq);
  p.k_len.assign(size_t(batch), sk);
  p.max_seqlen_q = sq;
  clamp_windows(p);
  if (lse) {
    p.lse = lse->data_ptr<float>();
    p.lse_batch_stride = hq * sq;
    p.lse_head_stride = sq;
    p.lse_token_stride = 1;
  }
  return p;
}

Problem varlen_problem(const char* op, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& cu_seqlens_q,
                       const TensorView& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                       const TensorView& out, const std::optional<TensorView>& lse,
                       const Params& params, Stream stream) {
  check_qkv(op, q, k, v, 3);
  check_params(op, params);
  check_like(op, "out", out, "q", q);
  const std::vector<int64_t> cq =
      host_offsets(op, "cu_seqlens_q", cu_seqlens_q, q.size(0), q, stream);
  const std::vector<int64_t> ck =
      host_offsets(op, "cu_seqlens_k", cu_seqlens_k, k.size(0), q, stream);
  TG_CHECK_VALUE(cq.size() == ck.size(), op,
                 ": cu_seqlens_q and cu_seqlens_k must describe "
                 "the same number of sequences, got ",
                 int64_t(cq.size()) - 1, " and ", int64_t(ck.size()) - 1);
  const int64_t batch = int64_t(cq.size()) - 1, hq = q.size(1);
  if (lse) {
    check_same_device(op, "lse", *lse, "q", q);
    check_dtype(op, "lse", *lse, {DType::Float32});
    check_shape(op, "lse", *lse, {hq, q.size(0)});
    check_contiguous(op, "lse", *lse);
  }
  Problem p;
  p.batch = batch;
  fill_common(p, q, k, v, out, params, true);
  for (int64_t b = 0; b < batch; ++b) {
    p.q_start.push_back(cq[b]);
    p.q_len.push_back(cq[b + 1] - cq[b]);
    p.k_start.push_back(ck[b]);
    p.k_len.push_back(ck[b + 1] - ck[b]);
    TG_CHECK_VALUE(p.q_len.back() <= max_seqlen_q && p.k_len.back() <= max_seqlen_k, op,
                   ": sequence ", b, " has ", p.q_len.back(), " queries and ", p.k_len.back(),
                   " keys, over max_seqlen_q = ", max_seqlen_q, " / max_seqlen_k = ", max_seqlen_k);
  }
  // The grids are sized by the longest sequence there is, not by the bound the caller gave:
  // a loose bound (FlashAttention's callers often pass the padded length, or a large
  // constant) would only launch empty tiles, and one past int32 cannot be launched at all.
  p.max_seqlen_q = p.q_len.empty() ? 0 : *std::max_element(p.q_len.begin(), p.q_len.end());
  clamp_windows(p);
  if (!q.device.is_cpu()) {
    p.cu_seqlens_q_device = cu_seqlens_q.data_ptr<const int32_t>();
    p.cu_seqlens_k_device = cu_seqlens_k.data_ptr<const int32_t>();
  }
  if (lse) {
    p.lse = lse->data_ptr<float>();
    p.lse_head_stride = q.size(0);
    p.lse_token_stride = 1;
  }
  return p;
}

}  // namespace tilegrid::attention
