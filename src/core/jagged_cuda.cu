#include <algorithm>

#include "core/cuda_check.h"
#include "core/jagged_cuda.h"
#include "tilegrid/core/jagged_index.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::cuda {
namespace {

// One thread per row.
__global__ void jagged_batch_index_kernel(const int64_t* __restrict__ offsets, int64_t num_tensors,
                                          int32_t* __restrict__ jidx, int64_t num_rows) {
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < num_rows;
       row += int64_t(gridDim.x) * blockDim.x)
    jidx[row] = static_cast<int32_t>(tensor_of_row(offsets, num_tensors, row));
}

// Any offset out of order sets *invalid (zeroed before the launch).
__global__ void offsets_valid_kernel(const int64_t* __restrict__ offsets, int64_t n, int64_t total,
                                     int* invalid) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i <= n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool bad = (i == 0 && offsets[0] != 0) || (i > 0 && offsets[i] < offsets[i - 1]) ||
                     (i == n && offsets[n] != total);
    if (bad) *invalid = 1;
  }
}

}  // namespace

bool offsets_valid(const int64_t* offsets, int64_t n, int64_t total, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  Tensor flag = Tensor::empty({1}, DType::Int32, Device::cuda(device), stream);
  int* invalid = flag.view().data_ptr<int>();
  TG_CUDA_CHECK(cudaMemsetAsync(invalid, 0, sizeof(int), s));
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads) / kThreads, 65536);
  offsets_valid_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(offsets, n, total, invalid);
  TG_CUDA_CHECK_LAUNCH();
  int host = 1;
  TG_CUDA_CHECK(cudaMemcpyAsync(&host, invalid, sizeof(int), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  return host == 0;
}

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

}  // namespace tilegrid::cuda
