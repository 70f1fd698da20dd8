// CPU attention backward: the reference the backward kernels are tested against, and the
// backward of CPU tensors. Everything in float64 from the stored inputs: the probabilities
// are recomputed from the scores and the forward's log-sum-exp, as the kernels do,
//   P = exp(s - lse),  dV += P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dO * O) + dlse),
//   dQ = scale * dS' K,  dK = scale * dS'^T Q,
// with dS' = dS * (1 - (s / softcap)^2) under a softcap (the derivative of
// softcap * tanh(x / softcap)). A query that sees no key (lse = -inf) gets dQ = 0; a NaN lse (a
// NaN among the row's scores) makes the gradients the row touches NaN, as torch's autograd does.
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

int64_t offset(const Operand& o, int64_t b, int64_t token, int64_t head) {
  return b * o.batch_stride + token * o.token_stride + head * o.head_stride;
}

// Rows first..first+count of one head of an operand, widened to float64, [count, d].
void load_rows(DType dtype, const Operand& o, int64_t b, int64_t first, int64_t count, int64_t head,
               int64_t d, std::vector<double>& rows) {
  rows.resize(size_t(count * d));
  for (int64_t r = 0; r < count; ++r) {
    const int64_t base = offset(o, b, first + r, head);
    for (int64_t c = 0; c < d; ++c) rows[size_t(r * d + c)] = load_element(dtype, o.data, base + c);
  }
}

void store_rows(DType dtype, const Operand& o, int64_t b, int64_t first, int64_t count,
                int64_t head, int64_t d, const std::vector<double>& rows) {
  for (int64_t r = 0; r < count; ++r) {
    const int64_t base = offset(o, b, first + r, head);
    for (int64_t c = 0; c < d; ++c) store_element(dtype, o.data, base + c, rows[size_t(r * d + c)]);
  }
}

double dot(const double* a, const double* b, int64_t d) {
  double sum = 0;
  for (int64_t c = 0; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

}  // namespace

void backward_cpu(const Problem& p, const Gradients& g) {
  const int64_t group = p.heads_q / p.heads_kv, d = p.head_dim;
  const double scale = p.scale, softcap = p.softcap;
  std::vector<double> k_rows, v_rows, dk_rows, dv_rows, q_row, do_row, o_row, dq_row;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.q_len[b], sk = p.k_len[b], q0 = p.q_start[b], k0 = p.k_start[b];
    const Mask mask{sq, sk, p.window_left, p.window_right};
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      load_rows(p.dtype, p.k, b, k0, sk, hk, d, k_rows);
      load_rows(p.dtype, p.v, b, k0, sk, hk, d, v_rows);
      dk_rows.assign(size_t(sk * d), 0.0);
      dv_rows.assign(size_t(sk * d), 0.0);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t i = 0; i < sq; ++i) {
          load_rows(p.dtype, p.q, b, q0 + i, 1, h, d, q_row);
          load_rows(p.dtype, g.dout, b, q0 + i, 1, h, d, do_row);
          load_rows(p.dtype, p.out, b, q0 + i, 1, h, d, o_row);
          dq_row.assign(size_t(d), 0.0);
          const IndexRange keys = mask.keys_of_query(i);
          const int64_t lse_index =
              b * p.lse_batch_stride + h * p.lse_head_stride + (q0 + i) * p.lse_token_stride;
          const double lse = p.lse[lse_index];
          if (!keys.empty() && lse != -std::numeric_limits<double>::infinity()) {
            // rowsum(dO * O) - dlse: the part of dP that every key of the row shares.
            double row_delta = dot(do_row.data(), o_row.data(), d);
            if (g.dlse != nullptr) row_delta -= g.dlse[lse_index];
            for (int64_t j = keys.first; j <= keys.last; ++j) {
              const double* kj = &k_rows[size_t(j * d)];
              const double* vj = &v_rows[size_t(j * d)];
              double s = scale * dot(q_row.data(), kj, d);
              if (softcap > 0) s = softcap * std::tanh(s / softcap);
              const double prob = std::exp(s - lse);
              double ds = prob * (dot(do_row.data(), vj, d) - row_delta);
              if (softcap > 0) ds *= 1.0 - (s / softcap) * (s / softcap);
              double* dkj = &dk_rows[size_t(j * d)];
              double* dvj = &dv_rows[size_t(j * d)];
              for (int64_t c = 0; c < d; ++c) {
                dvj[c] += prob * do_row[size_t(c)];
                dq_row[size_t(c)] += scale * ds * kj[c];
                dkj[c] += scale * ds * q_row[size_t(c)];
              }
            }
          }
          store_rows(p.dtype, g.dq, b, q0 + i, 1, h, d, dq_row);
        }
      }
      store_rows(p.dtype, g.dk, b, k0, sk, hk, d, dk_rows);
      store_rows(p.dtype, g.dv, b, k0, sk, hk, d, dv_rows);
    }
  }
}

}  // namespace tilegrid::attention
