// Routing of the Hopper kernel: what it supports and which head-dimension unit runs a call.
#include "attention/sm90/flash_fwd_sm90.h"

#include "attention/attention_problem.h"  // is_hopper_head_dim

namespace tilegrid::attention::sm90 {

bool supported(const FlashFwdParams& p, DType dtype, int head_dim) {
  if (dtype != DType::Float16 && dtype != DType::BFloat16) return false;
  if (!is_hopper_head_dim(head_dim)) return false;
  if (!tma_strides({p.q_row_stride, p.q_head_stride, p.q_batch_stride, p.k_row_stride,
                    p.k_head_stride, p.k_batch_stride, p.v_row_stride, p.v_head_stride,
                    p.v_batch_stride, p.out_row_stride, p.out_head_stride, p.out_batch_stride}))
    return false;
  // TMA extents are 32-bit and positive (no keys at all: the portable kernel writes the zeros).
  return p.rows_q > 0 && p.rows_k > 0 && p.rows_q < (int64_t(1) << 31) &&
         p.rows_k < (int64_t(1) << 31);
}

void forward(const FlashFwdParams& p, DType dtype, int head_dim, int switches, Stream stream) {
  switch (head_dim) {
    case 64:
      return forward_hdim64(p, dtype, switches, stream);
    case 128:
      return forward_hdim128(p, dtype, switches, stream);
    default:
      return forward_hdim256(p, dtype, switches, stream);
  }
}

}  // namespace tilegrid::attention::sm90
