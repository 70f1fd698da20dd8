#pragma once
// Attention of a few query tokens over a KV cache read where it lies: the attention of
// FlashAttention's flash_attn_with_kvcache (tilegrid.flash_attn_with_kvcache appends the new
// keys and applies the rotary embedding before it calls this). Conventions as attention.h:
// the mask aligned bottom-right on each sequence's keys, windows, softcap, GQA; a query that
// sees no key gets output 0 and log-sum-exp -inf.
//
// The cache is contiguous, [batch_cache, seqlen_cache, hk, d], sequence b reading row
// cache_batch_idx[b] (or b), or paged, [num_pages, page_size, hk, d], sequence b's cells being
// page block_table[b][c / page_size], slot c % page_size. Sequence b's keys are its cells
// [leftpad[b], seqlen_k[b]) (leftpad: contiguous caches only, as in FlashAttention).
//
// CPU tensors run the reference (float32 scores, float64 sums). CUDA tensors (float16 and
// bfloat16, head dims 64, 128 and 256, 16-byte aligned rows) run a kernel that reads the
// cache in place, the query heads of a KV head packed into one tile (cuda/flash_decode_*),
// with split-KV: num_splits > 1 splits each sequence's key tiles over that many CTAs, merged by
// their log-sum-exps; 0 chooses the count (decode_num_splits).
#include <cstdint>
#include <optional>

#include "tilegrid/attention/attention.h"
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::attention {

struct KvCache {
  TensorView k, v;                            // one shape and q's dtype and device
  TensorView seqlen_k;                        // int32 [batch]: the end of each sequence's cells
  std::optional<TensorView> leftpad;          // int32 [batch]: the start; unset: 0
  std::optional<TensorView> cache_batch_idx;  // int32 [batch]: the cache row; unset: b
  std::optional<TensorView> block_table;      // int32 [batch, max_pages]: paged when set
};

// q [b, sq, hq, d], out like q (contiguous); lse float32 [b, hq, sq] when given. num_splits:
// 0 (chosen) or 1..256; 1 on the CPU whatever is asked. check_values: the int32 vectors are
// copied to the host and checked against the cache (cells past its capacity, pages outside the
// pool, rows outside the cache) before any kernel runs, which on CUDA waits for `stream`;
// false leaves that to the caller (tilegrid.flash_attn_with_kvcache checks them on its own
// host copy): a CUDA call then neither copies nor waits, and num_splits = 0 sizes the splits
// for the cache's capacity. The CPU reference always reads them.
void forward_kvcache(const TensorView& q, const KvCache& cache, const Params& params,
                     int64_t num_splits, const TensorView& out,
                     const std::optional<TensorView>& lse, bool check_values = true,
                     Stream stream = {});

// The splits that num_splits = 0 chooses on CUDA device `device` for `batch` sequences of at
// most `max_keys` keys, `heads_kv` KV heads and `query_rows` packed rows (sq * hq / hk) each:
// enough CTAs for two per SM where the sequences are long enough to give each split's four
// warps at least four key tiles each. Not yet tuned by measurement.
int64_t decode_num_splits(int64_t batch, int64_t heads_kv, int64_t query_rows, int64_t max_keys,
                          int64_t head_dim, int device);

}  // namespace tilegrid::attention
