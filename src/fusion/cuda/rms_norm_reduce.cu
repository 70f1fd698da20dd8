// The last step of the RMSNorm weight gradient: sums the float32 partial rows that the
// backward kernels (generic and sm_90a) leave, one per block.
#include "core/cuda_check.h"
#include "fusion/cuda/rms_norm_kernels.cuh"
#include "fusion/rms_norm_cuda.h"

namespace tilegrid::rms_norm {
namespace {

using kernels::from_float;

// dweight[c] = sum_p partial[p][c]. Block (32, 8): 32 columns, 8 lanes over the partials,
// so each column's partials are read by 8 threads in parallel and loads stay coalesced.
template <class W>
__global__ void reduce_partials_kernel(const float* __restrict__ partial, int64_t num_partials,
                                       int64_t hidden, W* __restrict__ dweight) {
  __shared__ float sums[8][33];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.f;
  if (col < hidden)
    for (int64_t q = threadIdx.y; q < num_partials; q += 8) acc += partial[q * hidden + col];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= hidden) return;
  float total = 0.f;
#pragma unroll
  for (int lane = 0; lane < 8; ++lane) total += sums[lane][threadIdx.x];
  dweight[col] = from_float<W>(total);
}

template <class W>
void launch(const float* partial, int64_t num_partials, int64_t hidden, void* dweight,
            cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((hidden + 31) / 32);
  reduce_partials_kernel<W>
      <<<blocks, dim3(32, 8), 0, stream>>>(partial, num_partials, hidden, static_cast<W*>(dweight));
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void reduce_weight_partials(const float* partial, int64_t num_partials, int64_t hidden,
                            void* dweight, DType dweight_dtype, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (dweight_dtype) {
    case DType::Float32:
      return launch<float>(partial, num_partials, hidden, dweight, s);
    case DType::Float16:
      return launch<__half>(partial, num_partials, hidden, dweight, s);
    default:
      return launch<__nv_bfloat16>(partial, num_partials, hidden, dweight, s);
  }
}

}  // namespace tilegrid::rms_norm
