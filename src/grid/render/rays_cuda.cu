// The ray ops (voxels_along_rays, segments_along_rays, uniform_ray_samples,
// ray_implicit_intersection) on the GPU: one thread a ray through trace_ray, the
// code the CPU runs (ray_trace.h, ray_march.h), counted, scanned and written.
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/render/rays_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void init_boxes_kernel(int32_t* boxes, int64_t num_grids) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < 6 * num_grids;
       e += int64_t(gridDim.x) * blockDim.x)
    boxes[e] = e % 6 < 3 ? INT32_MAX : INT32_MIN;
}

__global__ void leaf_boxes_kernel(const LeafNode* leaves, int64_t num_leaves,
                                  const int64_t* voxel_offsets, int64_t num_grids,
                                  int32_t* boxes) {
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < num_leaves;
       l += int64_t(gridDim.x) * blockDim.x) {
    const LeafNode& leaf = leaves[l];
    const int64_t b = grid_of_row(voxel_offsets, num_grids, leaf.first_voxel);
    const int32_t o[3] = {leaf.origin.i, leaf.origin.j, leaf.origin.k};
    for (int a = 0; a < 3; ++a) {
      atomicMin(&boxes[6 * b + a], o[a]);
      atomicMax(&boxes[6 * b + 3 + a], o[a] + 8);
    }
  }
}

// counts[n + 1] = ray n's outputs (counts[0] is 0).
__global__ void count_kernel(TreeView tree, const VoxelTransform* transforms, GridBoxes boxes,
                             RayInputs in, RayOptions opt, int64_t* counts) {
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < in.num_rays;
       n += int64_t(gridDim.x) * blockDim.x)
    counts[n + 1] = trace_ray(tree, transforms, boxes, in, n, opt, 0, {});
  if (blockIdx.x == 0 && threadIdx.x == 0) counts[0] = 0;
}

__global__ void write_kernel(TreeView tree, const VoxelTransform* transforms, GridBoxes boxes,
                             RayInputs in, RayOptions opt, const int64_t* offsets,
                             RayOutputs out) {
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < in.num_rays;
       n += int64_t(gridDim.x) * blockDim.x)
    trace_ray(tree, transforms, boxes, in, n, opt, offsets[n], out);
}

}  // namespace

Tensor trace_rays(const GridBatch& grid, const RayInputs& in, const RayOptions& opt,
                  const std::function<RayOutputs(int64_t)>& allocate, Stream stream) {
  const int device = grid.device().index;
  CudaDeviceGuard guard(device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  const Device dev = grid.device();
  const int64_t num_grids = grid.num_grids();
  Tensor boxes = Tensor::empty({std::max<int64_t>(6 * num_grids, 1)}, DType::Int32, dev, stream);
  auto* box_data = static_cast<int32_t*>(boxes.data());
  if (num_grids > 0) {
    init_boxes_kernel<<<grid_stride_blocks(6 * num_grids, kThreads), kThreads, 0, s>>>(box_data,
                                                                                       num_grids);
    TG_CUDA_CHECK_LAUNCH();
  }
  if (grid.num_leaves() > 0) {
    leaf_boxes_kernel<<<grid_stride_blocks(grid.num_leaves(), kThreads), kThreads, 0, s>>>(
        grid.view().leaves, grid.num_leaves(),
        grid.voxel_offsets().view().data_ptr<const int64_t>(), num_grids, box_data);
    TG_CUDA_CHECK_LAUNCH();
  }
  const GridBoxes grid_boxes{box_data};
  Tensor offsets = Tensor::empty({in.num_rays + 1}, DType::Int64, dev, stream);
  auto* off = static_cast<int64_t*>(offsets.data());
  int64_t total = 0;
  if (in.num_rays > 0) {
    count_kernel<<<grid_stride_blocks(in.num_rays, kThreads), kThreads, 0, s>>>(
        grid.view(), grid.transforms(), grid_boxes, in, opt, off);
    TG_CUDA_CHECK_LAUNCH();
    size_t bytes = 0;
    TG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes, off + 1, off + 1, in.num_rays, s));
    Tensor scratch = Tensor::empty({int64_t(bytes) + 1}, DType::UInt8, dev, stream);
    TG_CUDA_CHECK(
        cub::DeviceScan::InclusiveSum(scratch.data(), bytes, off + 1, off + 1, in.num_rays, s));
    TG_CUDA_CHECK(cudaMemcpyAsync(&total, off + in.num_rays, sizeof(int64_t),
                                  cudaMemcpyDeviceToHost, s));
    TG_CUDA_CHECK(cudaStreamSynchronize(s));
  } else {
    TG_CUDA_CHECK(cudaMemsetAsync(off, 0, sizeof(int64_t), s));
  }
  const RayOutputs out = allocate(total);
  if (total > 0) {
    write_kernel<<<grid_stride_blocks(in.num_rays, kThreads), kThreads, 0, s>>>(
        grid.view(), grid.transforms(), grid_boxes, in, opt, off, out);
    TG_CUDA_CHECK_LAUNCH();
  }
  return offsets;
}

}  // namespace tilegrid::grid::cuda
