#pragma once
// Shared by the RMSNorm tuning aids in bench/cuda/: a bf16 forward problem on fresh device
// buffers, and a count of the elements where two outputs differ. Not part of the library.
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "batch_timing.cuh"
#include "fusion/cuda/rms_norm_kernels.cuh"

// [rows, hidden] bf16: x copied from `host` (at least rows * hidden values), y and rstd
// allocated, the given [hidden] weight, eps 1e-6.
inline tilegrid::rms_norm::ForwardParams bf16_forward_problem(
    const std::vector<__nv_bfloat16>& host, const __nv_bfloat16* weight, int64_t rows,
    int64_t hidden) {
  const int64_t n = rows * hidden;
  void *x, *y;
  float* rstd;
  CHECK(cudaMalloc(&x, n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&y, n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&rstd, rows * sizeof(float)));
  CHECK(cudaMemcpy(x, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  tilegrid::rms_norm::ForwardParams q;
  q.rows = rows;
  q.hidden = hidden;
  q.dtype = tilegrid::DType::BFloat16;
  q.weight_dtype = tilegrid::DType::BFloat16;
  q.x = {x, hidden};
  q.y = {y, hidden};
  q.weight = weight;
  q.rstd = rstd;
  q.eps = 1e-6f;
  return q;
}

// How many of the n bf16 elements of device arrays a and b differ.
inline int64_t count_differing(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n) {
  std::vector<__nv_bfloat16> ha(n), hb(n);
  CHECK(cudaMemcpy(ha.data(), a, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hb.data(), b, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  int64_t differ = 0;
  for (int64_t k = 0; k < n; ++k) differ += __bfloat162float(ha[k]) != __bfloat162float(hb[k]);
  return differ;
}
