#pragma once
// The CUDA side of pooling (internal; pooling_cuda.cu): device pointers, pooling.cpp checks
// first. taps = the map's rows; n_out / n_in its and the inverse's columns.
#include <cstdint>

#include "tilegrid/core/dtype.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::grid::cuda {

struct PoolProblem {
  const int32_t* map;      // [taps, n_out]
  const int32_t* inverse;  // [taps, n_in]
  int64_t taps, n_out, n_in, channels;
  DType dtype;
};

void max_pool_forward(const PoolProblem& p, const void* features, void* out, int32_t* argmax,
                      int device, Stream stream);
void max_pool_backward(const PoolProblem& p, const int32_t* argmax, const void* grad_out,
                       void* grad_features, int device, Stream stream);
void avg_pool_forward(const PoolProblem& p, const void* features, void* out, int device,
                      Stream stream);
void avg_pool_backward(const PoolProblem& p, const void* grad_out, void* grad_features, int device,
                       Stream stream);

}  // namespace tilegrid::grid::cuda
