// CPU RoPE rotation: the reference the CUDA kernel is tested against, and the CPU path. The
// angle and the rotation in float64 (the epilogue evaluator's arithmetic), rounded to out's
// dtype once.
#include <cstdint>
#include <vector>

#include "core/parallel_for.h"
#include "fusion/rope_rotate_params.h"
#include "tilegrid/core/element_access.h"
#include "tilegrid/gemm/epilogue/pairwise.h"

namespace tilegrid::rope {
namespace {

double position_at(const Params& p, int64_t row) {
  if (p.position_dtype == DType::Int32) return static_cast<const int32_t*>(p.positions)[row];
  return static_cast<double>(static_cast<const int64_t*>(p.positions)[row]);
}

}  // namespace

void rotate_cpu(const Params& p) {
  parallel_for(p.rows, [&](int64_t r) {
    const double position = p.inverse ? -position_at(p, r) : position_at(p, r);
    const int64_t xo = r * p.x_row_stride, oo = r * p.out_row_stride;
    for (int64_t c = 0; c < p.width; c += 2) {
      double x0 = load_element(p.dtype, p.x, xo + c), x1 = load_element(p.dtype, p.x, xo + c + 1);
      epilogue::rotate_pair(x0, x1, position * double(p.inv_freq[(c / 2) % p.half]));
      store_element(p.dtype, p.out, oo + c, x0);
      store_element(p.dtype, p.out, oo + c + 1, x1);
    }
  });
}

}  // namespace tilegrid::rope
