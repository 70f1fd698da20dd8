#pragma once
// What the KV-cache attention kernel reads (internal): a plain struct passed by value. Strides
// in elements; the last dimension of q, the caches and out is contiguous.
//
// Query rows are packed by KV head (FlashAttention 3's pack_gqa): the rows of one CTA are
// (token, head in group) pairs of one KV head, row r = token * group + head, so the group's
// query heads share each K/V tile that is read. Keys are read where they lie in the cache:
// contiguous caches [batch_cache, seqlen_cache, heads_kv, d] (row cache_batch_idx[b], or b),
// or page pools [pages, page_size, heads_kv, d] through block_table. Sequence b's keys are the
// cache cells [leftpad[b], seqlen_k[b]), key j of the sequence being cell leftpad[b] + j.
#include <cstdint>

namespace tilegrid::attention {

struct FlashDecodeParams {
  const void* q = nullptr;  // [batch, seqlen_q, heads_q, d]
  void* out = nullptr;      // like q; written when num_splits == 1
  float* lse = nullptr;     // [batch, heads_q, seqlen_q] contiguous, or null
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;

  const void* k = nullptr;  // a cache row or page: batch stride; a cell: row stride
  const void* v = nullptr;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  const int32_t* block_table = nullptr;  // [batch, block_table_stride]; null: contiguous
  int64_t block_table_stride = 0;
  int page_size = 0;                         // cells a page (block_table only)
  const int32_t* cache_batch_idx = nullptr;  // [batch] or null (contiguous caches only)
  const int32_t* leftpad = nullptr;          // [batch] or null: 0
  const int32_t* seqlen_k = nullptr;         // [batch]: end of each sequence's cells

  int batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, group = 1;
  // Scores in log2 units, as FlashFwdParams.
  float score_scale_log2 = 0;
  float softcap_scale = 0;  // 0: no softcap
  // FlashFwdParams' window, aligned bottom-right on each sequence's keys.
  int64_t window_left = -1, window_right = -1;

  // Split-KV: each CTA takes 1 / num_splits of its rows' key tiles. With more than one split,
  // the CTAs write float32 partial outputs (normalised by their own sums), row maxima (scores)
  // and sums there, merged by the combine kernel; [num_splits, batch, heads_q, seqlen_q, d]
  // and [num_splits, batch, heads_q, seqlen_q] each. Maxima and sums rather than one
  // log-sum-exp: past the exact-exponent threshold (common/softmax_base.cuh) a log-sum-exp's
  // rounding alone would misweigh splits whose maxima differ by a few ulps.
  int num_splits = 1;
  float* partial_out = nullptr;
  float* partial_max = nullptr;
  float* partial_sum = nullptr;
};

}  // namespace tilegrid::attention
