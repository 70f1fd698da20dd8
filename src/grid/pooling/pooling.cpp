// Pooling over a kernel map (tilegrid/grid/pooling.h): argument checks, the CPU loops (float64
// sums, every core) and dispatch to the CUDA kernels (pooling_cuda.cu).
#include "tilegrid/grid/pooling.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda_build.h"
#include "core/parallel_for.h"
#include "grid/conv/map_args.h"
#include "tilegrid/core/element_access.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/pooling/pooling_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

// The map and its inverse describe the same pairs: the same device, as many taps.
void check_inverse(const char* op, const TensorView& map, const TensorView& inverse) {
  check_map(op, "inverse", inverse);
  TG_CHECK_VALUE(inverse.device == map.device, op, ": the inverse map is on ", inverse.device,
                 " but the map is on ", map.device);
  TG_CHECK_VALUE(inverse.size(0) == map.size(0), op, ": the inverse map has ", inverse.size(0),
                 " taps but the map has ", map.size(0));
}

#ifdef TILEGRID_WITH_CUDA
cuda::PoolProblem problem(const int32_t* map, const int32_t* inverse, int64_t taps, int64_t n_out,
                          int64_t n_in, int64_t channels, DType dtype) {
  return {map, inverse, taps, n_out, n_in, channels, dtype};
}
#endif

}  // namespace

void max_pool_forward(const TensorView& map, const TensorView& features, const TensorView& out,
                      const TensorView& argmax, [[maybe_unused]] Stream stream) {
  constexpr const char* kOp = "max_pool_forward";
  check_map(kOp, "map", map);
  check_float(kOp, "features", features);
  const int64_t taps = map.size(0), n_out = map.size(1), n_in = features.size(0);
  const int64_t c = features.size(1);
  check_matrix(kOp, "features", features, n_in, c, features.dtype, map.device);
  check_matrix(kOp, "out", out, n_out, c, features.dtype, map.device);
  check_matrix(kOp, "argmax", argmax, n_out, c, DType::Int32, map.device);
  const int32_t* m = map.data_ptr<const int32_t>();
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::max_pool_forward(problem(m, nullptr, taps, n_out, n_in, c, features.dtype), features.data,
                           out.data, argmax.data_ptr<int32_t>(), map.device.index, stream);
#endif
    return;
  }
  int32_t* am = argmax.data_ptr<int32_t>();
  parallel_for(n_out, [&](int64_t o) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double best = 0;
      int32_t from = -1;
      for (int64_t t = 0; t < taps; ++t) {
        const int32_t i = m[t * n_out + o];
        if (i < 0 || i >= n_in) continue;
        const double v = load_element(features.dtype, features.data, int64_t(i) * c + ch);
        if (from < 0 || v > best || (v != v && best == best)) {
          best = v;
          from = i;
        }
      }
      store_element(features.dtype, out.data, o * c + ch, from < 0 ? 0.0 : best);
      am[o * c + ch] = from;
    }
  });
}

void max_pool_backward(const TensorView& inverse, const TensorView& argmax,
                       const TensorView& grad_out, const TensorView& grad_features, [[maybe_unused]] Stream stream) {
  constexpr const char* kOp = "max_pool_backward";
  check_map(kOp, "inverse", inverse);
  check_float(kOp, "grad_out", grad_out);
  const int64_t taps = inverse.size(0), n_in = inverse.size(1), n_out = grad_out.size(0);
  const int64_t c = grad_out.size(1);
  const DType dtype = grad_out.dtype;
  check_matrix(kOp, "grad_out", grad_out, n_out, c, dtype, inverse.device);
  check_matrix(kOp, "argmax", argmax, n_out, c, DType::Int32, inverse.device);
  check_matrix(kOp, "grad_features", grad_features, n_in, c, dtype, inverse.device);
  const int32_t* inv = inverse.data_ptr<const int32_t>();
  const int32_t* am = argmax.data_ptr<const int32_t>();
  if (inverse.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::max_pool_backward(problem(nullptr, inv, taps, n_out, n_in, c, dtype), am, grad_out.data,
                            grad_features.data, inverse.device.index, stream);
#endif
    return;
  }
  parallel_for(n_in, [&](int64_t i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0;
      for (int64_t t = 0; t < taps; ++t) {
        const int32_t o = inv[t * n_in + i];
        if (o >= 0 && o < n_out && am[int64_t(o) * c + ch] == i)
          sum += load_element(dtype, grad_out.data, int64_t(o) * c + ch);
      }
      store_element(dtype, grad_features.data, i * c + ch, sum);
    }
  });
}

void avg_pool_forward(const TensorView& map, const TensorView& features, const TensorView& out,
                      [[maybe_unused]] Stream stream) {
  constexpr const char* kOp = "avg_pool_forward";
  check_map(kOp, "map", map);
  check_float(kOp, "features", features);
  const int64_t taps = map.size(0), n_out = map.size(1), n_in = features.size(0);
  const int64_t c = features.size(1);
  check_matrix(kOp, "features", features, n_in, c, features.dtype, map.device);
  check_matrix(kOp, "out", out, n_out, c, features.dtype, map.device);
  const int32_t* m = map.data_ptr<const int32_t>();
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::avg_pool_forward(problem(m, nullptr, taps, n_out, n_in, c, features.dtype), features.data,
                           out.data, map.device.index, stream);
#endif
    return;
  }
  parallel_for(n_out, [&](int64_t o) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0;
      int n = 0;
      for (int64_t t = 0; t < taps; ++t) {
        const int32_t i = m[t * n_out + o];
        if (i < 0 || i >= n_in) continue;
        sum += load_element(features.dtype, features.data, int64_t(i) * c + ch);
        ++n;
      }
      store_element(features.dtype, out.data, o * c + ch, n > 0 ? sum / n : 0.0);
    }
  });
}

void avg_pool_backward(const TensorView& map, const TensorView& inverse, const TensorView& grad_out,
                       const TensorView& grad_features, [[maybe_unused]] Stream stream) {
  constexpr const char* kOp = "avg_pool_backward";
  check_map(kOp, "map", map);
  check_inverse(kOp, map, inverse);
  check_float(kOp, "grad_out", grad_out);
  const int64_t taps = map.size(0), n_out = map.size(1), n_in = inverse.size(1);
  const int64_t c = grad_out.size(1);
  const DType dtype = grad_out.dtype;
  check_matrix(kOp, "grad_out", grad_out, n_out, c, dtype, map.device);
  check_matrix(kOp, "grad_features", grad_features, n_in, c, dtype, map.device);
  const int32_t* m = map.data_ptr<const int32_t>();
  const int32_t* inv = inverse.data_ptr<const int32_t>();
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::avg_pool_backward(problem(m, inv, taps, n_out, n_in, c, dtype), grad_out.data,
                            grad_features.data, map.device.index, stream);
#endif
    return;
  }
  std::vector<int32_t> counts(size_t(n_out), 0);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      const int32_t i = m[t * n_out + o];
      counts[size_t(o)] += i >= 0 && i < n_in;
    }
  parallel_for(n_in, [&](int64_t i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0;
      for (int64_t t = 0; t < taps; ++t) {
        const int32_t o = inv[t * n_in + i];
        if (o >= 0 && o < n_out)
          sum += load_element(dtype, grad_out.data, int64_t(o) * c + ch) / counts[size_t(o)];
      }
      store_element(dtype, grad_features.data, i * c + ch, sum);
    }
  });
}

}  // namespace tilegrid::grid
