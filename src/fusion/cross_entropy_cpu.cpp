// CPU cross-entropy rows: the reference the CUDA kernel is tested against, and the CPU path.
// The row's maximum and sum of exponentials in float64; the gradient rounded to the logits'
// dtype once. The loss is (max - x_t) + log(sum), not (max + log(sum)) - x_t: with logits of
// 1e17 an ulp of max is 16, which would swallow log(sum) (torch forms it from log_softmax,
// x - max first, as here).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel_for.h"
#include "fusion/cross_entropy_params.h"
#include "tilegrid/core/element_access.h"

namespace tilegrid::cross_entropy {

void loss_and_grad_cpu(const Params& p) {
  const float scale = p.grad_scale != nullptr ? *p.grad_scale : 0.f;
  parallel_for(p.rows, [&](int64_t r) {
    const int64_t base = r * p.row_stride;
    const int64_t t = p.target[r];
    if (t == p.ignore_index) {
      p.loss[r] = 0.f;
      if (p.grad_scale != nullptr)
        for (int64_t c = 0; c < p.vocab; ++c) store_element(p.dtype, p.logits, base + c, 0.0);
      return;
    }
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < p.vocab; ++c)
      max = std::fmax(max, load_element(p.dtype, p.logits, base + c));
    double sum = 0;
    for (int64_t c = 0; c < p.vocab; ++c)
      sum += std::exp(load_element(p.dtype, p.logits, base + c) - max);
    const double log_sum = std::log(sum);
    const bool in_range = t >= 0 && t < p.vocab;
    p.loss[r] = in_range ? float((max - load_element(p.dtype, p.logits, base + t)) + log_sum)
                         : std::numeric_limits<float>::quiet_NaN();
    if (p.grad_scale == nullptr) return;
    for (int64_t c = 0; c < p.vocab; ++c) {
      const double prob = std::exp((load_element(p.dtype, p.logits, base + c) - max) - log_sum);
      store_element(p.dtype, p.logits, base + c, (prob - (c == t ? 1.0 : 0.0)) * double(scale));
    }
  });
}

}  // namespace tilegrid::cross_entropy
