// Finishing kernel of the row partial reductions: one thread a row combines the row's
// partials (N / tile_n of them, 16 for N = 4096 at tile_n = 256) with the same host/device
// code as the CPU evaluator. The partials are read once; this is a small, memory-bound step
// next to the GEMM that wrote them.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "gemm/epilogue/epilogue_cuda.h"

namespace tilegrid::epilogue {
namespace {

__global__ void finish_row_partials_kernel(Reduce op, const float* partials, int64_t rows,
                                           int64_t count, float* out) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row < rows) out[row] = combine_partials(op, partials + row * count, count);
}

}  // namespace

void finish_row_partials_cuda(Reduce op, const float* partials, int64_t rows, int64_t count,
                              float* out, int device, Stream stream) {
  constexpr int kThreads = 256;
  CudaDeviceGuard guard(device);
  const auto blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
  finish_row_partials_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      op, partials, rows, count, out);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::epilogue
