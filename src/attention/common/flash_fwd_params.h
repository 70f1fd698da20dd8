#pragma once
// What the flash forward kernel reads (internal): a plain struct passed by value. Strides in
// elements; the last dimension of q, k, v and out is contiguous. Dense batches use
// seqlen_q / seqlen_k and the batch strides; variable-length batches (cu_seqlens_q non-null)
// take each sequence's offsets from the device arrays and have zero batch strides.
#include <cstdint>

namespace tilegrid::attention {

struct FlashFwdParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // null: not written
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;  // token stride 1
  const int32_t* cu_seqlens_q = nullptr;              // device, [batch + 1], or null
  const int32_t* cu_seqlens_k = nullptr;
  int seqlen_q = 0, seqlen_k = 0;         // dense batches
  int max_seqlen_q = 0;                   // sizes the grid
  int batch = 0, heads_q = 0, group = 1;  // group: heads of q per head of k/v
  // Extents of the token dimension of q and of k/v: seqlen_q / seqlen_k for dense batches,
  // the total token counts for variable-length ones (the Hopper kernel's TMA descriptors need
  // them; rows past them read as zeros).
  int64_t rows_q = 0, rows_k = 0;
  int heads_kv = 0;
  // Scores in log2 units: without softcap, s * score_scale_log2 with s = q.k; with softcap,
  // tanh(s * softcap_scale) * score_scale_log2, where softcap_scale = scale / softcap and
  // score_scale_log2 = softcap * log2(e).
  float score_scale_log2 = 0;
  float softcap_scale = 0;  // 0: no softcap
  // Keys visible to query i (bottom-right aligned): [i + diag - window_left,
  // i + diag + window_right] with diag = seqlen_k - seqlen_q; -1: unbounded on that side.
  int64_t window_left = -1, window_right = -1;
};

}  // namespace tilegrid::attention
