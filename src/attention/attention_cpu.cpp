// CPU attention: the reference every attention kernel is tested against, a row at a time
// (attention_row_cpu.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention_problem.h"
#include "attention/attention_row_cpu.h"
#include "attention/common/mask.h"
#include "tilegrid/core/element_access.h"

namespace tilegrid::attention {
namespace {

int64_t offset(const Operand& o, int64_t b, int64_t token, int64_t head) {
  return b * o.batch_stride + token * o.token_stride + head * o.head_stride;
}

}  // namespace

void forward_cpu(const Problem& p) {
  const int64_t group = p.heads_q / p.heads_kv, d = p.head_dim;
  std::vector<float> q_row(size_t(d), 0.f);
  RowScratch scratch;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.q_len[b], sk = p.k_len[b];
    const Mask mask{sq, sk, p.window_left, p.window_right};
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      auto key_offset = [&](int64_t j) { return offset(p.k, b, p.k_start[b] + j, hk); };
      auto value_offset = [&](int64_t j) { return offset(p.v, b, p.k_start[b] + j, hk); };
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t qo = offset(p.q, b, p.q_start[b] + i, h);
        for (int64_t c = 0; c < d; ++c) q_row[size_t(c)] = float(load_element(p.dtype, p.q.data, qo + c));
        const RowResult r = attend_row_cpu(p.dtype, q_row.data(), d, mask.keys_of_query(i), key_offset,
                                           p.k.data, value_offset, p.v.data, p.scale, p.softcap, scratch);
        const int64_t oo = offset(p.out, b, p.q_start[b] + i, h);
        for (int64_t c = 0; c < d; ++c)
          store_element(p.dtype, p.out.data, oo + c,
                        r.sum == 0 ? 0.f : float(scratch.acc[size_t(c)] / r.sum));
        if (p.lse)
          p.lse[b * p.lse_batch_stride + h * p.lse_head_stride +
                (p.q_start[b] + i) * p.lse_token_stride] = r.lse;
      }
    }
  }
}

}  // namespace tilegrid::attention
