// Trilinear sampling and splatting as CUDA kernels over the traversal and the weights that the
// CPU path runs (TreeView::index_of, TrilinearCell). Splatting accumulates with atomicAdd.
//
// float32 features with a multiple of 4 channels (the common case) take the grouped kernels:
// 8 threads a point, thread c looks up corner c of the cell, the rows and weights are shared
// by warp shuffles, and the threads then read or add 4 channels at a time, so a row of
// features is touched by consecutive threads (coalesced) instead of by one thread channel by
// channel. Their sums are in float32 (8 terms). Other cases take one thread a point with
// float64 sums, as on the CPU.
#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/grid_cuda.h"
#include "tilegrid/core/jagged_index.h"
#include "tilegrid/grid/trilinear.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

// The cell around point p, the rows of its 8 voxels (-1 when inactive) and its grid.
template <class S>
__device__ void locate(const TreeView& tree, const VoxelTransform* transforms,
                       const PointSet& points, int64_t p, TrilinearCell& cell, int64_t rows[8],
                       int64_t& grid) {
  grid = tensor_of_row(points.joffsets, points.num_tensors, p);
  const S* xyz = static_cast<const S*>(points.xyz);
  const double world[3] = {double(xyz[3 * p]), double(xyz[3 * p + 1]), double(xyz[3 * p + 2])};
  double u[3];
  transforms[grid].world_to_voxel(world, u);
  cell = TrilinearCell::at(u);
  CachedLookup lookup(tree, grid);  // the 8 corners mostly share a leaf
  for (int c = 0; c < 8; ++c) rows[c] = cell.in_range ? lookup.index_of(cell.voxel(c)) : -1;
}

template <class S>
__global__ void sample_kernel(TreeView tree, const VoxelTransform* transforms, PointSet points,
                              const S* __restrict__ features, int64_t channels,
                              S* __restrict__ out) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < points.n;
       p += int64_t(gridDim.x) * blockDim.x) {
    TrilinearCell cell;
    int64_t rows[8], grid;
    locate<S>(tree, transforms, points, p, cell, rows, grid);
    double w[8];
    for (int c = 0; c < 8; ++c) w[c] = cell.weight(c);
    for (int64_t ch = 0; ch < channels; ++ch) {
      double acc = 0;
      for (int c = 0; c < 8; ++c)
        if (rows[c] >= 0) acc += w[c] * double(features[rows[c] * channels + ch]);
      out[p * channels + ch] = S(acc);
    }
  }
}

template <class S>
__global__ void backward_points_kernel(TreeView tree, const VoxelTransform* transforms,
                                       PointSet points, const S* __restrict__ features,
                                       const S* __restrict__ grad_out, int64_t channels,
                                       S* __restrict__ grad_points) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < points.n;
       p += int64_t(gridDim.x) * blockDim.x) {
    TrilinearCell cell;
    int64_t rows[8], grid;
    locate<S>(tree, transforms, points, p, cell, rows, grid);
    double g[3] = {0, 0, 0};
    for (int c = 0; c < 8; ++c) {
      if (rows[c] < 0) continue;
      double dot = 0;
      for (int64_t ch = 0; ch < channels; ++ch)
        dot += double(grad_out[p * channels + ch]) * double(features[rows[c] * channels + ch]);
      for (int a = 0; a < 3; ++a) g[a] += dot * cell.weight_gradient(c, a);
    }
    for (int a = 0; a < 3; ++a) grad_points[3 * p + a] = S(g[a] / transforms[grid].voxel_size[a]);
  }
}

template <class S>
__global__ void splat_kernel(TreeView tree, const VoxelTransform* transforms, PointSet points,
                             const S* __restrict__ values, int64_t channels, S* __restrict__ out) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < points.n;
       p += int64_t(gridDim.x) * blockDim.x) {
    TrilinearCell cell;
    int64_t rows[8], grid;
    locate<S>(tree, transforms, points, p, cell, rows, grid);
    for (int c = 0; c < 8; ++c) {
      if (rows[c] < 0) continue;
      const double w = cell.weight(c);
      for (int64_t ch = 0; ch < channels; ++ch)
        atomicAdd(out + rows[c] * channels + ch, S(w * double(values[p * channels + ch])));
    }
  }
}

constexpr int kLanes = 8;  // threads a point in the grouped kernels: one per cell corner

// Row and weight of every corner of point p's cell, in all 8 lanes of p's group.
__device__ void locate_grouped(const TreeView& tree, const VoxelTransform* transforms,
                               const PointSet& points, int64_t p, int lane, int64_t rows[8],
                               float weights[8]) {
  const unsigned group = 0xffu << (threadIdx.x % 32 & ~(kLanes - 1));
  const int64_t grid = tensor_of_row(points.joffsets, points.num_tensors, p);
  const float* xyz = static_cast<const float*>(points.xyz);
  const double world[3] = {double(xyz[3 * p]), double(xyz[3 * p + 1]), double(xyz[3 * p + 2])};
  double u[3];
  transforms[grid].world_to_voxel(world, u);
  const TrilinearCell cell = TrilinearCell::at(u);
  const int64_t row = cell.in_range ? tree.index_of(grid, cell.voxel(lane)) : -1;
  const float weight = float(cell.weight(lane));
  for (int c = 0; c < 8; ++c) {
    rows[c] = __shfl_sync(group, row, c, kLanes);
    weights[c] = __shfl_sync(group, weight, c, kLanes);
  }
}

// features / out: [rows, groups] float4 (groups = channels / 4). All 8 lanes of a group share
// one point, so whole groups enter and leave the loop together (the shuffles need that).
__global__ void sample_grouped_kernel(TreeView tree, const VoxelTransform* transforms,
                                      PointSet points, const float4* __restrict__ features,
                                      int64_t groups, float4* __restrict__ out) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < points.n * kLanes;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = t / kLanes;
    const int lane = int(t % kLanes);
    int64_t rows[8];
    float w[8];
    locate_grouped(tree, transforms, points, p, lane, rows, w);
    for (int64_t g = lane; g < groups; g += kLanes) {
      float4 acc = {0, 0, 0, 0};
      for (int c = 0; c < 8; ++c) {
        if (rows[c] < 0) continue;
        const float4 f = features[rows[c] * groups + g];
        acc.x += w[c] * f.x;
        acc.y += w[c] * f.y;
        acc.z += w[c] * f.z;
        acc.w += w[c] * f.w;
      }
      out[p * groups + g] = acc;
    }
  }
}

__global__ void splat_grouped_kernel(TreeView tree, const VoxelTransform* transforms,
                                     PointSet points, const float4* __restrict__ values,
                                     int64_t groups, float4* __restrict__ out) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < points.n * kLanes;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = t / kLanes;
    const int lane = int(t % kLanes);
    int64_t rows[8];
    float w[8];
    locate_grouped(tree, transforms, points, p, lane, rows, w);
    for (int64_t g = lane; g < groups; g += kLanes) {
      const float4 v = values[p * groups + g];
      for (int c = 0; c < 8; ++c) {
        if (rows[c] < 0) continue;
        const float4 add = {w[c] * v.x, w[c] * v.y, w[c] * v.z, w[c] * v.w};
        float4* target = out + rows[c] * groups + g;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(target, add);  // one 16-byte atomic on Hopper
#else
        atomicAdd(&target->x, add.x);
        atomicAdd(&target->y, add.y);
        atomicAdd(&target->z, add.z);
        atomicAdd(&target->w, add.w);
#endif
      }
    }
  }
}

// Whether the grouped float4 kernels apply: float32, channels % 4 == 0, 16-byte aligned rows.
bool grouped(const PointSet& points, int64_t channels, const void* a, const void* b) {
  return points.dtype == DType::Float32 && channels % 4 == 0 &&
         reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

}  // namespace

void sample_trilinear(const TreeView& tree, const VoxelTransform* transforms,
                      const PointSet& points, const void* features, int64_t channels, void* out,
                      int device, Stream stream) {
  if (points.n == 0) return;
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (grouped(points, channels, features, out))
    sample_grouped_kernel<<<grid_stride_blocks(points.n * kLanes, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const float4*>(features), channels / 4,
        static_cast<float4*>(out));
  else if (points.dtype == DType::Float32)
    sample_kernel<float><<<grid_stride_blocks(points.n, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const float*>(features), channels,
        static_cast<float*>(out));
  else
    sample_kernel<double><<<grid_stride_blocks(points.n, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const double*>(features), channels,
        static_cast<double*>(out));
  TG_CUDA_CHECK_LAUNCH();
}

void sample_trilinear_backward_points(const TreeView& tree, const VoxelTransform* transforms,
                                      const PointSet& points, const void* features,
                                      const void* grad_out, int64_t channels, void* grad_points,
                                      int device, Stream stream) {
  if (points.n == 0) return;
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (points.dtype == DType::Float32)
    backward_points_kernel<float><<<grid_stride_blocks(points.n, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const float*>(features),
        static_cast<const float*>(grad_out), channels, static_cast<float*>(grad_points));
  else
    backward_points_kernel<double><<<grid_stride_blocks(points.n, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const double*>(features),
        static_cast<const double*>(grad_out), channels, static_cast<double*>(grad_points));
  TG_CUDA_CHECK_LAUNCH();
}

void splat_trilinear(const TreeView& tree, const VoxelTransform* transforms, const PointSet& points,
                     const void* values, int64_t channels, void* out, int64_t total_voxels,
                     int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  const size_t bytes = size_t(total_voxels * channels) * itemsize(points.dtype);
  if (bytes) TG_CUDA_CHECK(cudaMemsetAsync(out, 0, bytes, s));
  if (points.n == 0) return;
  if (grouped(points, channels, values, out))
    splat_grouped_kernel<<<grid_stride_blocks(points.n * kLanes, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const float4*>(values), channels / 4,
        static_cast<float4*>(out));
  else if (points.dtype == DType::Float32)
    splat_kernel<float><<<grid_stride_blocks(points.n, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const float*>(values), channels,
        static_cast<float*>(out));
  else
    splat_kernel<double><<<grid_stride_blocks(points.n, kThreads), kThreads, 0, s>>>(
        tree, transforms, points, static_cast<const double*>(values), channels,
        static_cast<double*>(out));
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
