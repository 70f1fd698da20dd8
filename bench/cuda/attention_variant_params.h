#pragma once
// The forward's parameters of a dense problem for the attention variant libraries
// (bench/cuda/attention_*_variant.cu; not part of the library): q, k, v and out
// [batch, seqlen, heads, head_dim], contiguous, lse [batch, heads, seqlen] float32.
#include <cstdint>

#include "attention/common/flash_fwd_params.h"

namespace tilegrid::attention::variant {

inline FlashFwdParams dense_forward_params(const void* q, const void* k, const void* v,
                                           const void* out, const float* lse, int batch,
                                           int seqlen, int heads, int head_dim, int causal,
                                           float scale) {
  FlashFwdParams p;
  const int64_t row = int64_t(heads) * head_dim, seq = row * seqlen;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = const_cast<void*>(out);
  p.lse = const_cast<float*>(lse);
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.out_batch_stride = seq;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = row;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = head_dim;
  p.lse_batch_stride = int64_t(heads) * seqlen;
  p.lse_head_stride = seqlen;
  p.seqlen_q = p.seqlen_k = p.max_seqlen_q = seqlen;
  p.batch = batch;
  p.heads_q = p.heads_kv = heads;
  p.group = 1;
  p.rows_q = p.rows_k = seqlen;
  p.score_scale_log2 = float(double(scale) * 1.4426950408889634);
  p.window_right = causal ? 0 : -1;
  return p;
}

}  // namespace tilegrid::attention::variant
