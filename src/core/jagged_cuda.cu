#include "core/cuda_check.h"
#include "core/jagged_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::cuda {
namespace {

// One thread per row.
__global__ void jagged_batch_index_kernel(const int64_t* __restrict__ offsets, int64_t num_tensors,
                                          int32_t* __restrict__ jidx, int64_t num_rows) {
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < num_rows;
       row += int64_t(gridDim.x) * blockDim.x)
    jidx[row] = static_cast<int32_t>(tensor_of_row(offsets, num_tensors, row));
}

}  // namespace

void jagged_batch_index(const int64_t* offsets, int64_t num_tensors, int32_t* jidx,
                        int64_t num_rows, int device, Stream stream) {
  if (num_rows == 0) return;
  CudaDeviceGuard guard(device);
  constexpr int kThreads = 256;
  int64_t blocks = (num_rows + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;
  jagged_batch_index_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                              static_cast<cudaStream_t>(stream.handle)>>>(offsets, num_tensors,
                                                                          jidx, num_rows);
  TG_CUDA_CHECK_LAUNCH();
}

void copy_to_host(void* dst, const void* src, size_t nbytes, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace tilegrid::cuda
