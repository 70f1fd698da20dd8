// integrate_tsdf on the GPU: one thread a voxel through tsdf_voxel.h, the CPU's code
// (compiled without FMA contraction, so that both give the same bits).
#include <algorithm>

#include "core/cuda_check.h"
#include "grid/tsdf/tsdf_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void integrate_kernel(TsdfInputs in, int64_t voxels) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < voxels;
       r += int64_t(gridDim.x) * blockDim.x)
    integrate_tsdf_voxel(in, r);
}

}  // namespace

void integrate_tsdf(const TsdfInputs& in, int64_t voxels, int device, Stream stream) {
  if (voxels == 0) return;
  CudaDeviceGuard guard(device);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((voxels + kThreads - 1) / kThreads, 1 << 20));
  integrate_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(in, voxels);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
