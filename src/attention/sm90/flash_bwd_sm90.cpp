// Routing of the Hopper backward: what it supports, its buffers' size, which unit runs a call.
#include "attention/sm90/flash_bwd_sm90.h"

#include "attention/attention_problem.h"  // is_hopper_head_dim
#include "attention/sm90/flash_bwd_sm90_rows.h"
#include "attention/sm90/flash_fwd_sm90.h"  // tma_strides

namespace tilegrid::attention::sm90 {

bool backward_supported(const FlashBwdParams& g, DType dtype, int head_dim) {
  const FlashFwdParams& p = g.fwd;
  if (dtype != DType::Float16 && dtype != DType::BFloat16) return false;
  if (!is_hopper_head_dim(head_dim)) return false;
  if (!tma_strides({p.q_row_stride, p.q_head_stride, p.q_batch_stride, p.k_row_stride,
                    p.k_head_stride, p.k_batch_stride, p.v_row_stride, p.v_head_stride,
                    p.v_batch_stride, g.dout_row_stride, g.dout_head_stride, g.dout_batch_stride}))
    return false;
  return p.rows_q > 0 && p.rows_k > 0 && p.rows_q < (int64_t(1) << 31) &&
         p.rows_k < (int64_t(1) << 31);
}

int64_t backward_rows(const FlashFwdParams& p, int head_dim) {
  return sm90_bwd::PaddedRows::of(p, sm90_bwd::block_m(head_dim)).total;
}

int64_t backward_dq_order_counters(const FlashFwdParams& p, int head_dim) {
  const int block_m = sm90_bwd::block_m(head_dim);
  return int64_t(p.heads_q) * sm90_bwd::PaddedRows::of(p, block_m).total / block_m + 1;
}

int dq_row_floats(int head_dim) {
  return sm90_bwd::DqTileLayout{sm90_bwd::block_m(head_dim), head_dim}.row_floats();
}

void backward(const FlashBwdParams& g, const BackwardWorkspace& ws, DType dtype, int head_dim,
              int max_seqlen_k, Stream stream) {
  if (head_dim == 64) return backward_hdim64(g, ws, dtype, max_seqlen_k, stream);
  if (head_dim == 128) return backward_hdim128(g, ws, dtype, max_seqlen_k, stream);
  return backward_hdim256(g, ws, dtype, max_seqlen_k, stream);
}

}  // namespace tilegrid::attention::sm90
