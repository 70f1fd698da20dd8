// CPU RMSNorm: the reference the CUDA kernels are tested against, and the CPU fallback.
// Elementwise math in float32 as on the GPU; row sums in float64 so that the reference's
// own rounding stays far below the GPU's.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusion/rms_norm_params.h"
#include "tilegrid/core/element_access.h"

namespace tilegrid::rms_norm {
namespace {

// Elementwise math in float32, as on the GPU.
float load_f(DType dtype, const void* base, int64_t i) {
  return float(load_element(dtype, base, i));
}

}  // namespace

void forward_cpu(const ForwardParams& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t xo = r * p.x.row_stride, yo = r * p.y.row_stride;
    double sum_sq = 0;
    for (int64_t c = 0; c < p.hidden; ++c) {
      double v = load_f(p.dtype, p.x.data, xo + c);
      sum_sq += v * v;
    }
    float rstd = static_cast<float>(1.0 / std::sqrt(sum_sq / double(p.hidden) + double(p.eps)));
    if (p.rstd) p.rstd[r] = rstd;
    for (int64_t c = 0; c < p.hidden; ++c) {
      float w = p.weight ? load_f(p.weight_dtype, p.weight, c) : 1.f;
      store_element(p.dtype, p.y.data, yo + c, load_f(p.dtype, p.x.data, xo + c) * rstd * w);
    }
  }
}

void backward_cpu(const BackwardParams& p) {
  std::vector<double> dweight(p.weight ? static_cast<size_t>(p.hidden) : 0, 0.0);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t xo = r * p.x.row_stride, go = r * p.dy.row_stride, dxo = r * p.dx.row_stride;
    const int64_t ro = r * p.dresidual.row_stride;
    const float rstd = p.rstd[r];
    double dot = 0;  // sum over the row of xhat * w * dy
    for (int64_t c = 0; c < p.hidden; ++c) {
      float w = p.weight ? load_f(p.weight_dtype, p.weight, c) : 1.f;
      float xhat = load_f(p.dtype, p.x.data, xo + c) * rstd;
      float dy = load_f(p.dtype, p.dy.data, go + c);
      dot += double(xhat) * double(w * dy);
      if (p.weight) dweight[c] += double(dy) * double(xhat);
    }
    const float mean_dot = static_cast<float>(dot / double(p.hidden));
    for (int64_t c = 0; c < p.hidden; ++c) {
      float w = p.weight ? load_f(p.weight_dtype, p.weight, c) : 1.f;
      float xhat = load_f(p.dtype, p.x.data, xo + c) * rstd;
      float dy = load_f(p.dtype, p.dy.data, go + c);
      const float residual = p.dresidual.data ? load_f(p.dtype, p.dresidual.data, ro + c) : 0.f;
      store_element(p.dtype, p.dx.data, dxo + c, rstd * (w * dy - xhat * mean_dot) + residual);
    }
  }
  if (p.weight)
    for (int64_t c = 0; c < p.hidden; ++c)
      store_element(p.weight_dtype, p.dweight, c, static_cast<float>(dweight[c]));
}

}  // namespace tilegrid::rms_norm
