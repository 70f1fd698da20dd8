#pragma once
// Epilogue primitive: partial reductions along each row, within column tiles.
//   RowPartials: partials(i, t) = op over v(i, j) for j in [t * tile_n, (t + 1) * tile_n)
//                (the last tile may be shorter); partials is float32 [M, ceil(W / tile_n)].
//                v passes through unchanged. On the GPU tile_n is the kernel's N tile (in
//                the current width: a Glu before the reduction halves it).
//   finish_row_partials combines the partials of each row into out [M] (float32): the full
//                row's sum, sum of squares, max or log-sum-exp (e.g. the RMSNorm statistic
//                of a residual stream, or a cross-entropy's normaliser).
#include <cmath>
#include <cstdint>
#include <limits>

#include "tilegrid/core/host_device.h"
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::epilogue {

enum class Reduce : uint8_t { Sum, SumSquares, Max, LogSumExp };

struct RowPartials {
  Reduce op = Reduce::Sum;
  int64_t tile_n = 256;
  TensorView partials;  // float32 [M, ceil(W / tile_n)], contiguous
};

// out[i] = the combination of partials(i, :) for op (sum for Sum and SumSquares).
void finish_row_partials(Reduce op, const TensorView& partials, const TensorView& out,
                         Stream stream = {});

// The combination of `count` partials (or of `count` values: a log-sum-exp of log-sum-exps
// is the log-sum-exp of everything), host/device code shared by the CPU evaluator and the
// CUDA finishing kernel. Max and LogSumExp of nothing are -inf, sums of nothing 0.
template <class T>
TG_HOST_DEVICE T combine_partials(Reduce op, const T* values, int64_t count) {
  if (op == Reduce::Sum || op == Reduce::SumSquares) {
    T sum = T(0);
    for (int64_t t = 0; t < count; ++t) sum += values[t];
    return sum;
  }
  T top = -std::numeric_limits<T>::infinity();
  for (int64_t t = 0; t < count; ++t) top = values[t] > top ? values[t] : top;
  if (op == Reduce::Max || top == -std::numeric_limits<T>::infinity()) return top;
  T sum = T(0);
  for (int64_t t = 0; t < count; ++t) sum += std::exp(values[t] - top);
  return top + std::log(sum);
}

}  // namespace tilegrid::epilogue
