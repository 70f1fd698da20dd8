#pragma once
// One query row's attention on the CPU (internal): the reference's arithmetic, written once
// for the dense and variable-length forward (attention_cpu.cpp) and the KV-cache one
// (attention_kvcache.cpp). Dot products in float32, as a kernel computes them; the scaled
// scores (a float32 times a float32, exact in float64), probabilities, the softmax sum and the
// output accumulation in float64, so that the reference's own rounding stays far below the
// kernels' at any softmax_scale (at 2e6 on scores near 8, scaled in float32 a score 1.91 below
// the maximum would read 2 below, its weight exp(-1.91) = 0.149 as 0.135). NaN propagates as
// in torch's scaled_dot_product_attention (math backend): a NaN score, or a +inf one (its
// exponential is inf / inf), makes the sum NaN, and the output and lse with it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/common/mask.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/element_access.h"

namespace tilegrid::attention {

struct RowScratch {
  std::vector<double> scores;  // scaled (and soft-capped)
  std::vector<double> acc;  // [d]: the row's un-normalised output, sum(p_j v_j)
};

struct RowResult {
  double sum = 0;  // sum(p_j): the output is acc / sum (0 where sum is 0)
  float lse = 0;   // natural-log log-sum-exp of the scaled scores; -inf where sum is 0
};

// q_row: d floats. Keys `keys` (inclusive; empty when first > last), key j's elements at
// key_offset(j) in k and value_offset(j) in v (dtype elements). Fills scratch.acc.
template <class KeyOffset, class ValueOffset>
RowResult attend_row_cpu(DType dtype, const float* q_row, int64_t d, const IndexRange& keys,
                         const KeyOffset& key_offset, const void* k,
                         const ValueOffset& value_offset, const void* v, float scale,
                         float softcap, RowScratch& scratch) {
  auto load_f = [dtype](const void* base, int64_t i) { return float(load_element(dtype, base, i)); };
  const int64_t lo = keys.first, hi = keys.last;
  scratch.scores.resize(size_t(std::max<int64_t>(hi - lo + 1, 0)));
  scratch.acc.assign(size_t(d), 0.0);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  double row_max = kNegInf;
  for (int64_t j = lo; j <= hi; ++j) {
    const int64_t ko = key_offset(j);
    float dot = 0.f;
    for (int64_t c = 0; c < d; ++c) dot += q_row[c] * load_f(k, ko + c);
    double s = double(dot) * double(scale);
    if (softcap > 0) s = double(softcap) * std::tanh(s / double(softcap));
    scratch.scores[size_t(j - lo)] = s;
    row_max = std::max(row_max, s);  // skips a NaN score: the sum below carries it
  }
  // No key, or only -inf scores: base 0, so that exp(-inf - base) = 0 rather than NaN.
  const double base = row_max == kNegInf ? 0.0 : row_max;
  double sum = 0;
  for (int64_t j = lo; j <= hi; ++j) {
    const double prob = std::exp(scratch.scores[size_t(j - lo)] - base);
    sum += prob;
    const int64_t vo = value_offset(j);
    for (int64_t c = 0; c < d; ++c) scratch.acc[size_t(c)] += prob * load_f(v, vo + c);
  }
  RowResult r;
  r.sum = sum;
  r.lse = sum == 0 ? -std::numeric_limits<float>::infinity() : float(base + std::log(sum));
  return r;
}

}  // namespace tilegrid::attention
