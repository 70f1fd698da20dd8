// The finishing kernels of the fused programs' reductions (see epilogue_partials.h).
#include "gemm/sm90/epilogue_partials.h"

#include "core/cuda_check.h"

namespace tilegrid::gemm::sm90 {
namespace {

constexpr int kThreads = 256;

__device__ float value_of(float x) {
  return x;
}
__device__ float value_of(const epilogue::LogSumExpState& x) {
  return x.value();
}

template <class State>
__global__ void transpose_row_partials_kernel(const State* buffer, int64_t m, int64_t m_pad,
                                              int64_t count, float* partials) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * count) return;
  const int64_t i = idx / count, t = idx % count;
  partials[idx] = value_of(buffer[t * m_pad + i]);
}

template <class State>
void launch_transpose(const State* buffer, int64_t m, int64_t m_pad, int64_t count, float* partials,
                      cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((m * count + kThreads - 1) / kThreads);
  transpose_row_partials_kernel<<<blocks, kThreads, 0, stream>>>(buffer, m, m_pad, count, partials);
  TG_CUDA_CHECK_LAUNCH();
}

// One thread a column: its loads are independent (unrolled), and neighbours read
// neighbouring addresses.
__global__ void sum_column_partials_kernel(const float* partials, int64_t tiles, int64_t ld,
                                           int64_t n, float* sums) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float sum = 0.f;
#pragma unroll 8
  for (int64_t t = 0; t < tiles; ++t) sum += partials[t * ld + j];
  sums[j] = sum;
}

}  // namespace

void transpose_row_partials(const float* buffer, int64_t m, int64_t m_pad, int64_t count,
                            float* partials, cudaStream_t stream) {
  launch_transpose(buffer, m, m_pad, count, partials, stream);
}

void transpose_row_partials(const epilogue::LogSumExpState* buffer, int64_t m, int64_t m_pad,
                            int64_t count, float* partials, cudaStream_t stream) {
  launch_transpose(buffer, m, m_pad, count, partials, stream);
}

void sum_column_partials(const float* partials, int64_t tiles, int64_t ld, int64_t n, float* sums,
                         cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  sum_column_partials_kernel<<<blocks, kThreads, 0, stream>>>(partials, tiles, ld, n, sums);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::gemm::sm90
