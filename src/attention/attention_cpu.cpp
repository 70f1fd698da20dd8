// CPU attention: the reference every attention kernel is tested against. Scores and
// probabilities in float32 as a kernel computes them; the softmax sum and the output
// accumulation in float64 so that the reference's own rounding stays far below the kernels'.
// NaN propagates as in torch's scaled_dot_product_attention (math backend): a NaN score, or a
// +inf one (its exponential is inf / inf), makes the row's sum NaN, and its output and lse.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention_problem.h"
#include "attention/common/mask.h"
#include "tilegrid/core/element_access.h"

namespace tilegrid::attention {
namespace {

// Scores and probabilities in float32, as a kernel computes them.
float load_f(DType dtype, const void* base, int64_t i) {
  return float(load_element(dtype, base, i));
}

int64_t offset(const Operand& o, int64_t b, int64_t token, int64_t head) {
  return b * o.batch_stride + token * o.token_stride + head * o.head_stride;
}

}  // namespace

void forward_cpu(const Problem& p) {
  const int64_t group = p.heads_q / p.heads_kv, d = p.head_dim;
  std::vector<float> scores, q_row(size_t(d), 0.f);
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.q_len[b], sk = p.k_len[b];
    const Mask mask{sq, sk, p.window_left, p.window_right};
    scores.resize(size_t(sk));
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        const IndexRange keys = mask.keys_of_query(i);
        const int64_t lo = keys.first, hi = keys.last;

        const int64_t qo = offset(p.q, b, p.q_start[b] + i, h);
        for (int64_t c = 0; c < d; ++c) q_row[size_t(c)] = load_f(p.dtype, p.q.data, qo + c);
        float row_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j <= hi; ++j) {
          const int64_t ko = offset(p.k, b, p.k_start[b] + j, hk);
          float dot = 0.f;
          for (int64_t c = 0; c < d; ++c)
            dot += q_row[size_t(c)] * load_f(p.dtype, p.k.data, ko + c);
          float s = dot * p.scale;
          if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
          scores[size_t(j)] = s;
          row_max = std::max(row_max, s);  // skips a NaN score: the sum below carries it
        }
        // No key, or only -inf scores: base 0, so that exp(-inf - base) = 0 rather than NaN.
        const float base = row_max == -std::numeric_limits<float>::infinity() ? 0.f : row_max;

        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = lo; j <= hi; ++j) {
          const float prob = std::exp(scores[size_t(j)] - base);
          sum += prob;
          const int64_t vo = offset(p.v, b, p.k_start[b] + j, hk);
          for (int64_t c = 0; c < d; ++c)
            acc[size_t(c)] += double(prob) * load_f(p.dtype, p.v.data, vo + c);
        }
        const int64_t oo = offset(p.out, b, p.q_start[b] + i, h);
        for (int64_t c = 0; c < d; ++c)
          store_element(p.dtype, p.out.data, oo + c, sum == 0 ? 0.f : float(acc[size_t(c)] / sum));
        if (p.lse) {
          const float lse =
              sum == 0 ? -std::numeric_limits<float>::infinity() : float(base + std::log(sum));
          p.lse[b * p.lse_batch_stride + h * p.lse_head_stride +
                (p.q_start[b] + i) * p.lse_token_stride] = lse;
        }
      }
    }
  }
}

}  // namespace tilegrid::attention
