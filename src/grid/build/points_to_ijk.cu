// World points to voxel coordinates on the GPU, for GridBatch.from_points (the voxel of each
// point) and from_nearest_voxels_to_points (the 8 voxels around it). Bad points are reported
// through an error code that the caller turns into a message.
#include <climits>

#include "core/cuda_check.h"
#include "grid/grid_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

template <class S>
__global__ void points_to_ijk_kernel(const S* __restrict__ xyz,
                                     const int64_t* __restrict__ joffsets, int64_t num_grids,
                                     int64_t n, const VoxelTransform* __restrict__ transforms,
                                     int corners, int32_t* __restrict__ out,
                                     int* __restrict__ error) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const double world[3] = {double(xyz[3 * p]), double(xyz[3 * p + 1]), double(xyz[3 * p + 2])};
    if (!isfinite(world[0]) || !isfinite(world[1]) || !isfinite(world[2])) {
      atomicMax(error, int(PointsError::NotFinite));
      continue;
    }
    double u[3];
    transforms[tensor_of_row(joffsets, num_grids, p)].world_to_voxel(world, u);
    double base[3];
    for (int a = 0; a < 3; ++a) {
      base[a] = corners == 1 ? ::round(u[a]) : ::floor(u[a]);
      if (base[a] < double(INT_MIN) || base[a] + (corners == 1 ? 0 : 1) > double(INT_MAX)) {
        atomicMax(error, int(PointsError::OutOfRange));
        base[a] = 0;
      }
    }
    for (int c = 0; c < corners; ++c)
      for (int a = 0; a < 3; ++a)
        out[(p * corners + c) * 3 + a] = int32_t(base[a]) + ((c >> (2 - a)) & 1);
  }
}

}  // namespace

PointsError points_to_ijk(const void* xyz, DType dtype, const int64_t* joffsets, int64_t num_grids,
                          int64_t n, const VoxelTransform* transforms, int corners, int32_t* out,
                          int device, Stream stream) {
  if (n == 0) return PointsError::None;
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  Tensor error = Tensor::empty({1}, DType::Int32, Device::cuda(device), stream);
  int* err = static_cast<int*>(error.data());
  TG_CUDA_CHECK(cudaMemsetAsync(err, 0, sizeof(int), s));
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20));
  if (dtype == DType::Float32)
    points_to_ijk_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(xyz), joffsets,
                                                     num_grids, n, transforms, corners, out, err);
  else
    points_to_ijk_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const double*>(xyz), joffsets,
                                                     num_grids, n, transforms, corners, out, err);
  TG_CUDA_CHECK_LAUNCH();
  int code = 0;
  TG_CUDA_CHECK(cudaMemcpyAsync(&code, err, sizeof(int), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  return PointsError(code);
}

}  // namespace tilegrid::grid::cuda
