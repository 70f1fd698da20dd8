// forward_kvcache (tilegrid/attention/kvcache.h): argument checks, the CPU reference and the
// dispatch to the CUDA kernels (cuda/flash_decode_*).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "attention/attention_row_cpu.h"
#include "attention/attention_validate.h"
#include "attention/common/mask.h"
#include "tilegrid/attention/kvcache.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/element_access.h"
#include "tilegrid/core/tensor.h"
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
#include "attention/attention_cuda.h"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#endif

namespace tilegrid::attention {
namespace {

constexpr const char* kOp = "flash_attn_with_kvcache";
constexpr int64_t kMaxSplits = 256;

// An int32 vector of the caller's on q's device: its dtype, shape and place.
void check_ints(const char* name, const TensorView& t, const Shape& shape, const TensorView& q) {
  check_dtype(kOp, name, t, {DType::Int32});
  check_shape(kOp, name, t, shape);
  check_contiguous(kOp, name, t);
  check_data(kOp, name, t);
  check_same_device(kOp, name, t, "q", q);
}

// Its values on the host (a CUDA copy waits for `stream`).
std::vector<int64_t> host_ints(const char* name, const TensorView& t, Stream stream) {
  std::vector<int64_t> out;
  if (t.device.is_cpu()) {
    const int32_t* p = t.data_ptr<const int32_t>();
    out.assign(p, p + t.numel());
  } else {
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
    out = offsets_to_host(t.data_ptr<const int32_t>(), t.numel(), t.device.index, stream);
#else
    (void)stream;
    throw Error(detail::concat(kOp, ": ", name, " on ", t.device,
                               ": this build of tilegrid has no CUDA attention kernels"));
#endif
  }
  return out;
}

// What the checks found: sizes, each sequence's cells, and the parameters as the kernels
// take them.
struct Checked {
  int64_t batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  bool paged = false;
  int64_t page_size = 0, max_pages = 0;
  std::vector<int64_t> start, end, row;  // cells [start, end) of cache row (contiguous)
  std::vector<int64_t> pages;            // [batch, max_pages] (paged)
  int64_t longest = 0;  // keys of the longest sequence; the capacity where values were not read
  float scale = 0, softcap = 0;
  int64_t window_left = -1, window_right = -1;
};

// The parameters as the kernels take them. A window past every sequence's keys is no window
// (as attention_validate.cpp clamps it).
Checked finish(Checked r, const Params& params) {
  r.scale = float(params.softmax_scale.value_or(1.0 / std::sqrt(double(r.head_dim))));
  r.softcap = float(params.softcap);
  r.window_left = params.window_left;
  r.window_right = params.causal ? 0 : params.window_right;
  if (r.window_left >= r.seqlen_q + r.longest) r.window_left = -1;
  if (r.window_right >= r.seqlen_q + r.longest) r.window_right = -1;
  return r;
}

Checked check(const TensorView& q, const KvCache& c, const Params& params, int64_t num_splits,
              const TensorView& out, const std::optional<TensorView>& lse, bool check_values,
              Stream stream) {
  check_dtype(kOp, "q", q, {DType::Float16, DType::BFloat16, DType::Float32});
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k_cache", &c.k}, std::pair{"v_cache", &c.v}}) {
    check_ndim(kOp, name, *t, 4);
    check_last_dim_contiguous(kOp, name, *t);
    check_data(kOp, name, *t);
    if (t != &q) {
      check_dtype(kOp, name, *t, {q.dtype});
      check_same_device(kOp, name, *t, "q", q);
    }
  }
  TG_CHECK_VALUE(c.k.shape == c.v.shape, kOp, ": k_cache and v_cache must have one shape, got ",
                 c.k.shape, " and ", c.v.shape);
  Checked r;
  r.batch = q.size(0);
  r.seqlen_q = q.size(1);
  r.heads_q = q.size(2);
  r.head_dim = q.size(3);
  r.heads_kv = c.k.size(2);
  TG_CHECK_VALUE(c.k.size(3) == r.head_dim, kOp, ": the caches' head dim must be q's (", r.head_dim,
                 "), got ", c.k.size(3));
  TG_CHECK_VALUE(r.heads_kv >= 1 && r.heads_q % r.heads_kv == 0, kOp, ": heads of q (", r.heads_q,
                 ") must be a multiple of the caches' (", r.heads_kv, ")");
  TG_CHECK_VALUE(num_splits >= 0 && num_splits <= kMaxSplits, kOp, ": num_splits must be in [0, ",
                 kMaxSplits, "], got ", num_splits);
  check_same_device(kOp, "out", out, "q", q);
  check_dtype(kOp, "out", out, {q.dtype});
  check_shape(kOp, "out", out, q.shape);
  check_contiguous(kOp, "out", out);
  if (lse) {
    check_same_device(kOp, "lse", *lse, "q", q);
    check_dtype(kOp, "lse", *lse, {DType::Float32});
    check_shape(kOp, "lse", *lse, {r.batch, r.heads_q, r.seqlen_q});
    check_contiguous(kOp, "lse", *lse);
  }
  check_params(kOp, params);

  // Each sequence's cells: the vectors' shapes, then (with check_values, and always on the
  // CPU, whose reference reads them) their values on the host before any kernel runs.
  check_ints("cache_seqlens", c.seqlen_k, {r.batch}, q);
  if (c.leftpad) check_ints("cache_leftpad", *c.leftpad, {r.batch}, q);
  if (c.cache_batch_idx) check_ints("cache_batch_idx", *c.cache_batch_idx, {r.batch}, q);
  r.paged = c.block_table.has_value();
  if (r.paged) {
    TG_CHECK_VALUE(!c.leftpad && !c.cache_batch_idx, kOp,
                   ": cache_leftpad and cache_batch_idx do not go with block_table (as in "
                   "FlashAttention)");
    check_ndim(kOp, "block_table", *c.block_table, 2);
    r.max_pages = c.block_table->size(1);
    check_ints("block_table", *c.block_table, {r.batch, r.max_pages}, q);
    r.page_size = c.k.size(1);
    TG_CHECK_VALUE(r.page_size >= 1, kOp, ": pages of the pool must hold at least one cell");
  }
  const int64_t capacity = r.paged ? r.max_pages * r.page_size : c.k.size(1);
  r.longest = capacity;
  if (!check_values && q.device.is_cuda()) return finish(r, params);
  r.end = host_ints("cache_seqlens", c.seqlen_k, stream);
  r.start = c.leftpad ? host_ints("cache_leftpad", *c.leftpad, stream)
                      : std::vector<int64_t>(size_t(r.batch), 0);
  if (r.paged) {
    r.pages = host_ints("block_table", *c.block_table, stream);
  } else if (c.cache_batch_idx) {
    r.row = host_ints("cache_batch_idx", *c.cache_batch_idx, stream);
  } else {
    r.row.resize(size_t(r.batch));
    for (int64_t b = 0; b < r.batch; ++b) r.row[size_t(b)] = b;
  }
  for (int64_t b = 0; b < r.batch; ++b) {
    const int64_t s = r.start[size_t(b)], e = r.end[size_t(b)];
    TG_CHECK_VALUE(0 <= s && s <= e && e <= capacity, kOp, ": sequence ", b,
                   " must have 0 <= cache_leftpad <= cache_seqlens <= the cache's capacity ",
                   capacity, ", got ", s, " and ", e);
    if (r.paged) {
      for (int64_t page = 0; page < (e + r.page_size - 1) / r.page_size; ++page) {
        const int64_t entry = r.pages[size_t(b * r.max_pages + page)];
        TG_CHECK_VALUE(0 <= entry && entry < c.k.size(0), kOp, ": block_table[", b, "][", page,
                       "] = ", entry, " is outside the pool [0, ", c.k.size(0), ")");
      }
    } else {
      const int64_t row = r.row[size_t(b)];
      TG_CHECK_VALUE(0 <= row && row < c.k.size(0), kOp, ": cache_batch_idx[", b, "] = ", row,
                     " is outside the cache's rows [0, ", c.k.size(0), ")");
    }
  }
  r.longest = 0;
  for (int64_t b = 0; b < r.batch; ++b)
    r.longest = std::max(r.longest, r.end[size_t(b)] - r.start[size_t(b)]);
  return finish(r, params);
}

void forward_kvcache_cpu(const TensorView& q, const KvCache& c, const Checked& r,
                         const TensorView& out, const std::optional<TensorView>& lse) {
  const int64_t group = r.heads_q / r.heads_kv, d = r.head_dim;
  std::vector<float> q_row(static_cast<size_t>(d));
  RowScratch scratch;
  for (int64_t b = 0; b < r.batch; ++b) {
    const int64_t start = r.start[size_t(b)], keys = r.end[size_t(b)] - start;
    const Mask mask{r.seqlen_q, keys, r.window_left, r.window_right};
    for (int64_t h = 0; h < r.heads_q; ++h) {
      const int64_t hk = h / group;
      auto cell_offset = [&](const TensorView& cache, int64_t j) {
        const int64_t cell = start + j;
        const int64_t row = r.paged ? r.pages[size_t(b * r.max_pages + cell / r.page_size)]
                                    : r.row[size_t(b)];
        const int64_t slot = r.paged ? cell % r.page_size : cell;
        return row * cache.stride(0) + slot * cache.stride(1) + hk * cache.stride(2);
      };
      auto key_offset = [&](int64_t j) { return cell_offset(c.k, j); };
      auto value_offset = [&](int64_t j) { return cell_offset(c.v, j); };
      for (int64_t i = 0; i < r.seqlen_q; ++i) {
        const int64_t qo = b * q.stride(0) + i * q.stride(1) + h * q.stride(2);
        for (int64_t x = 0; x < d; ++x) q_row[size_t(x)] = float(load_element(q.dtype, q.data, qo + x));
        const RowResult row = attend_row_cpu(q.dtype, q_row.data(), d, mask.keys_of_query(i),
                                             key_offset, c.k.data, value_offset, c.v.data, r.scale,
                                             r.softcap, scratch);
        const int64_t oo = b * out.stride(0) + i * out.stride(1) + h * out.stride(2);
        for (int64_t x = 0; x < d; ++x)
          store_element(q.dtype, out.data, oo + x,
                        row.sum == 0 ? 0.f : float(scratch.acc[size_t(x)] / row.sum));
        if (lse) lse->data_ptr<float>()[(b * r.heads_q + h) * r.seqlen_q + i] = row.lse;
      }
    }
  }
}

#if defined(TILEGRID_WITH_ATTENTION_CUDA)
void forward_kvcache_cuda(const TensorView& q, const KvCache& c, const Checked& r, int64_t num_splits,
                          const TensorView& out, const std::optional<TensorView>& lse, Stream stream) {
  CudaDeviceGuard guard(q.device.index);  // q's device may not be the current one
  TG_CHECK_TYPE(q.dtype == DType::Float16 || q.dtype == DType::BFloat16, kOp,
                ": on CUDA, q and the caches must be float16 or bfloat16, got ", q.dtype);
  TG_CHECK_VALUE(r.head_dim == 64 || r.head_dim == 128 || r.head_dim == 256, kOp,
                 ": on CUDA the head dim must be 64, 128 or 256, got ", r.head_dim);
  TG_CHECK_VALUE(r.softcap > 0 || r.scale > 0, kOp,
                 ": on CUDA without softcap, softmax_scale must be > 0, got ", r.scale,
                 " (the kernel takes each row's maximum before scaling)");
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k_cache", &c.k}, std::pair{"v_cache", &c.v},
                         std::pair{"out", &out}})
    check_row_loads(kOp, name, *t);
  TG_CHECK_VALUE(r.batch <= 65535 && r.heads_kv <= 65535, kOp,
                 ": on CUDA at most 65535 sequences and KV heads, got ", r.batch, " and ", r.heads_kv);
  const int64_t group = r.heads_q / r.heads_kv;
  TG_CHECK_VALUE(r.seqlen_q * group <= int64_t(1) << 24, kOp, ": on CUDA at most 2^24 query rows a KV head "
                 "(seqlen_q x heads of q per KV head), got ", r.seqlen_q * group);
  if (r.batch == 0 || r.seqlen_q == 0) return;

  const int64_t splits =
      num_splits > 0 ? num_splits
                     : decode_num_splits(r.batch, r.heads_kv, r.seqlen_q * group, r.longest,
                                         r.head_dim, q.device.index);

  FlashDecodeParams p;
  p.q = q.data;
  p.out = out.data;
  p.lse = lse ? lse->data_ptr<float>() : nullptr;
  p.q_batch_stride = q.stride(0);
  p.q_row_stride = q.stride(1);
  p.q_head_stride = q.stride(2);
  p.out_batch_stride = out.stride(0);
  p.out_row_stride = out.stride(1);
  p.out_head_stride = out.stride(2);
  p.k = c.k.data;
  p.v = c.v.data;
  p.k_batch_stride = c.k.stride(0);
  p.k_row_stride = c.k.stride(1);
  p.k_head_stride = c.k.stride(2);
  p.v_batch_stride = c.v.stride(0);
  p.v_row_stride = c.v.stride(1);
  p.v_head_stride = c.v.stride(2);
  if (r.paged) {
    p.block_table = c.block_table->data_ptr<const int32_t>();
    p.block_table_stride = r.max_pages;
    p.page_size = int(r.page_size);
  }
  if (c.cache_batch_idx) p.cache_batch_idx = c.cache_batch_idx->data_ptr<const int32_t>();
  if (c.leftpad) p.leftpad = c.leftpad->data_ptr<const int32_t>();
  p.seqlen_k = c.seqlen_k.data_ptr<const int32_t>();
  p.batch = int(r.batch);
  p.seqlen_q = int(r.seqlen_q);
  p.heads_q = int(r.heads_q);
  p.heads_kv = int(r.heads_kv);
  p.group = int(group);
  constexpr double kLog2e = 1.4426950408889634;
  if (r.softcap > 0) {
    p.softcap_scale = r.scale / r.softcap;
    p.score_scale_log2 = float(double(r.softcap) * kLog2e);
  } else {
    p.score_scale_log2 = float(double(r.scale) * kLog2e);
  }
  p.window_left = std::min<int64_t>(r.window_left, std::numeric_limits<int>::max());
  p.window_right = std::min<int64_t>(r.window_right, std::numeric_limits<int>::max());
  p.num_splits = int(splits);

  // Split partials from the device's allocator, alive until the combine kernel has run on
  // `stream` (the allocator's stream-ordered frees).
  Tensor partial_out, partial_max_and_sum;
  if (splits > 1) {
    const int64_t rows = r.batch * r.heads_q * r.seqlen_q;
    partial_out = Tensor::empty({splits, rows, r.head_dim}, DType::Float32, q.device, stream);
    partial_max_and_sum = Tensor::empty({2, splits, rows}, DType::Float32, q.device, stream);
    p.partial_out = static_cast<float*>(partial_out.data());
    p.partial_max = static_cast<float*>(partial_max_and_sum.data());
    p.partial_sum = p.partial_max + splits * rows;
  }
  if (r.head_dim == 64)
    decode_cuda_hdim64(p, q.dtype, stream);
  else if (r.head_dim == 128)
    decode_cuda_hdim128(p, q.dtype, stream);
  else
    decode_cuda_hdim256(p, q.dtype, stream);
}
#endif

}  // namespace

int64_t decode_num_splits(int64_t batch, int64_t heads_kv, int64_t query_rows, int64_t max_keys,
                          int64_t head_dim, int device) {
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
  const int64_t sms = cuda::multiprocessor_count(device);
#else
  (void)device;
  const int64_t sms = 1;
#endif
  const int64_t ctas = batch * heads_kv * ((query_rows + 15) / 16);
  if (ctas <= 0 || ctas >= 2 * sms) return 1;
  // Four warps a split, each with at least four key tiles (flash_decode_kernel.cuh's tiles:
  // 32 keys at head dim 64, 16 above).
  const int64_t tile = head_dim <= 64 ? 32 : 16;
  const int64_t by_keys = std::max<int64_t>(max_keys / (4 * 4 * tile), 1);
  const int64_t by_sms = (2 * sms + ctas - 1) / ctas;
  return std::clamp<int64_t>(std::min(by_keys, by_sms), 1, kMaxSplits);
}

void forward_kvcache(const TensorView& q, const KvCache& cache, const Params& params,
                     int64_t num_splits, const TensorView& out, const std::optional<TensorView>& lse,
                     bool check_values, Stream stream) {
  const Checked r = check(q, cache, params, num_splits, out, lse, check_values, stream);
  if (q.device.is_cpu()) return forward_kvcache_cpu(q, cache, r, out, lse);
#if defined(TILEGRID_WITH_ATTENTION_CUDA)
  forward_kvcache_cuda(q, cache, r, num_splits, out, lse, stream);
#else
  throw Error(detail::concat(kOp, ": q on ", q.device, ": this build of tilegrid has no CUDA attention kernels"));
#endif
}

}  // namespace tilegrid::attention
