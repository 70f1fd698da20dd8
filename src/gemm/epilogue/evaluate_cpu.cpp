// The CPU evaluator of epilogue programs: the product in float64, then each step in float64
// on the whole [M, W] value matrix, outputs rounded once to their dtype. Slow and plain on
// purpose: it is the reference for the fused kernels, so it follows the definitions in the
// primitive headers line by line.
#include "gemm/epilogue/evaluate_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <variant>
#include <vector>

#include "tilegrid/core/element_access.h"

namespace tilegrid::epilogue {
namespace {

// The value tile: [rows, width] float64, row-major.
struct Values {
  int64_t rows = 0, width = 0;
  std::vector<double> v;
  double& at(int64_t i, int64_t j) { return v[i * width + j]; }
};

Values product(const gemm::Problem& p) {
  Values out{p.m, p.n, std::vector<double>(static_cast<size_t>(p.m * p.n), 0.0)};
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t kk = 0; kk < p.k; ++kk) {
      const double a = load_element(p.dtype, p.a, i * p.a_stride_m() + kk * p.a_stride_k());
      for (int64_t j = 0; j < p.n; ++j)
        out.at(i, j) += a * load_element(p.dtype, p.b, kk * p.b_stride_k() + j * p.b_stride_n());
    }
  return out;
}

double combine(Combine c, double v, double x) {
  return c == Combine::Add ? v + x : v * x;
}

// Element (i, j) of a row-major matrix view, or element i of a vector.
double load(const TensorView& t, int64_t i, int64_t j) {
  return load_element(t.dtype, t.data, i * t.strides[0] + j);
}
double load(const TensorView& t, int64_t i) {
  return load_element(t.dtype, t.data, i);
}

double load_position(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::Int32:
      return t.data_ptr<const int32_t>()[i];
    case DType::Int64:
      return static_cast<double>(t.data_ptr<const int64_t>()[i]);
    default:
      return load(t, i);
  }
}

void apply(Values& val, const PerRow& s) {
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < val.width; ++j)
      val.at(i, j) = combine(s.combine, val.at(i, j), load(s.values, i));
}

void apply(Values& val, const PerColumn& s) {
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < val.width; ++j)
      val.at(i, j) = combine(s.combine, val.at(i, j), load(s.values, j));
}

void apply(Values& val, const Scalar& s) {
  for (double& x : val.v) x = combine(s.combine, x, s.value);
}

void apply(Values& val, const Tile& s) {
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < val.width; ++j)
      val.at(i, j) = combine(s.combine, val.at(i, j), load(s.values, i, j));
}

void apply(Values& val, const Elementwise& s) {
  for (double& x : val.v) x = activate(s.fn, x);
}

void apply(Values& val, const ElementwiseGrad& s) {
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < val.width; ++j)
      val.at(i, j) *= activate_grad(s.fn, load(s.input, i, j));
}

void apply(Values& val, const Glu& s) {
  Values out{val.rows, val.width / 2, std::vector<double>(val.v.size() / 2)};
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < out.width; ++j)
      out.at(i, j) = glu(s.act, val.at(i, 2 * j), val.at(i, 2 * j + 1));
  val = std::move(out);
}

void apply(Values& val, const GluGrad& s) {
  Values out{val.rows, val.width * 2, std::vector<double>(val.v.size() * 2)};
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < val.width; ++j) {
      const double g = load(s.input, i, 2 * j), u = load(s.input, i, 2 * j + 1);
      glu_grad(s.act, val.at(i, j), g, u, out.at(i, 2 * j), out.at(i, 2 * j + 1));
    }
  val = std::move(out);
}

void apply(Values& val, const Rope& s) {
  for (int64_t i = 0; i < val.rows; ++i) {
    const double pos = load_position(s.positions, i);
    for (int64_t j = 0; j < val.width / 2; ++j) {
      const double t = (s.inverse ? -pos : pos) * load(s.frequencies, j);
      rotate_pair(val.at(i, 2 * j), val.at(i, 2 * j + 1), t);
    }
  }
}

void apply(Values& val, const RowPartials& s) {
  const int64_t count = (val.width + s.tile_n - 1) / s.tile_n;
  float* partials = s.partials.data_ptr<float>();
  std::vector<double> tile;
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t t = 0; t < count; ++t) {
      const int64_t j0 = t * s.tile_n, j1 = std::min(val.width, j0 + s.tile_n);
      tile.assign(val.v.begin() + i * val.width + j0, val.v.begin() + i * val.width + j1);
      if (s.op == Reduce::SumSquares)
        for (double& x : tile) x *= x;
      // Within a tile, a log-sum-exp of values is what combine_partials computes.
      const Reduce within = s.op == Reduce::SumSquares ? Reduce::Sum : s.op;
      partials[i * count + t] = static_cast<float>(
          combine_partials(within, tile.data(), static_cast<int64_t>(tile.size())));
    }
}

void apply(Values& val, const ColumnSum& s) {
  for (int64_t j = 0; j < val.width; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < val.rows; ++i) sum += val.at(i, j);
    s.out.data_ptr<float>()[j] = static_cast<float>(sum);
  }
}

void apply(Values& val, const Store& s) {
  for (int64_t i = 0; i < val.rows; ++i)
    for (int64_t j = 0; j < val.width; ++j)
      store_element(s.out.dtype, s.out.data, i * s.out.strides[0] + j, val.at(i, j));
}

}  // namespace

void evaluate_cpu(const gemm::Problem& p, const Program& program) {
  Values val = product(p);
  for (const Step& step : program.steps) std::visit([&](const auto& s) { apply(val, s); }, step);
}

void finish_row_partials_cpu(Reduce op, const float* partials, int64_t rows, int64_t count,
                             float* out) {
  for (int64_t i = 0; i < rows; ++i) out[i] = combine_partials(op, partials + i * count, count);
}

}  // namespace tilegrid::epilogue
