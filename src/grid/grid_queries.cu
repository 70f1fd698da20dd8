// CUDA lookups over a GridBatch's tree: one thread a coordinate (or a leaf voxel), running the
// traversal the CPU path runs (TreeView::index_of); and the selections of the derived grids
// (grid/build/derived_grids.cpp) over a batch's voxels.
#include <cub/device/device_scan.cuh>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/grid_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void ijk_to_index_kernel(TreeView tree, const int32_t* __restrict__ xyz,
                                    const int64_t* __restrict__ joffsets, int64_t num_tensors,
                                    int64_t n, int64_t* __restrict__ out) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = tensor_of_row(joffsets, num_tensors, p);
    out[p] = tree.index_of(b, {xyz[3 * p], xyz[3 * p + 1], xyz[3 * p + 2]});
  }
}

// One thread per (leaf, voxel position); inactive positions do nothing.
__global__ void active_ijk_kernel(const LeafNode* __restrict__ leaves, int64_t num_leaves,
                                  int32_t* __restrict__ xyz) {
  constexpr int kVoxels = ChildMask<kLeafLog2>::kChildren;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < num_leaves * kVoxels;
       t += int64_t(gridDim.x) * blockDim.x) {
    const LeafNode& leaf = leaves[t / kVoxels];
    const uint32_t v = uint32_t(t % kVoxels);
    if (!leaf.voxels.test(v)) continue;
    int32_t* row = xyz + 3 * (leaf.first_voxel + leaf.voxels.rank(v));
    row[0] = leaf.origin.i + int32_t(v >> (2 * kLeafLog2));
    row[1] = leaf.origin.j + int32_t((v >> kLeafLog2) & 7);
    row[2] = leaf.origin.k + int32_t(v & 7);
  }
}

__global__ void all_taps_found_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t n,
                                      bool* __restrict__ keep) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n;
       o += int64_t(gridDim.x) * blockDim.x) {
    bool all = true;
    for (int64_t t = 0; t < volume; ++t) all = all && map[t * n + o] >= 0;
    keep[o] = all;
  }
}

// flags[p] = keep[p] for p < n, and flags[n] = 0, so that the exclusive scan's last entry is
// the kept count.
__global__ void keep_flags_kernel(const bool* __restrict__ keep, int64_t n,
                                  int64_t* __restrict__ flags) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p <= n;
       p += int64_t(gridDim.x) * blockDim.x)
    flags[p] = p < n && keep[p];
}

// Kept row p goes to positions[p]; grid b's first kept row is positions[voxel_offsets[b]].
__global__ void kept_scatter_kernel(const int32_t* __restrict__ xyz,
                                    const int64_t* __restrict__ voxel_offsets, int64_t num_grids,
                                    int64_t n, const bool* __restrict__ keep,
                                    const int64_t* __restrict__ positions,
                                    int32_t* __restrict__ out, int64_t* __restrict__ offsets) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n || p <= num_grids;
       p += int64_t(gridDim.x) * blockDim.x) {
    if (p <= num_grids) offsets[p] = positions[voxel_offsets[p]];
    if (p < n && keep[p])
      for (int a = 0; a < 3; ++a) out[3 * positions[p] + a] = xyz[3 * p + a];
  }
}

}  // namespace

void all_taps_found(const int32_t* map, int64_t volume, int64_t n, bool* keep, int device,
                    Stream stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device);
  all_taps_found_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0,
                          static_cast<cudaStream_t>(stream.handle)>>>(map, volume, n, keep);
  TG_CUDA_CHECK_LAUNCH();
}

KeptVoxels kept_voxels(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids,
                       int64_t n, const bool* keep, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  const Device dev = Device::cuda(device);
  Tensor flags = Tensor::empty({n + 1}, DType::Int64, dev, stream);
  Tensor positions = Tensor::empty({n + 1}, DType::Int64, dev, stream);
  int64_t* f = static_cast<int64_t*>(flags.data());
  int64_t* pos = static_cast<int64_t*>(positions.data());
  keep_flags_kernel<<<grid_stride_blocks(n + 1, kThreads), kThreads, 0, s>>>(keep, n, f);
  TG_CUDA_CHECK_LAUNCH();
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, f, pos, n + 1, s));
  Tensor scratch = Tensor::empty({int64_t(bytes) + 1}, DType::UInt8, dev, stream);
  TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scratch.data(), bytes, f, pos, n + 1, s));
  int64_t kept = 0;
  TG_CUDA_CHECK(cudaMemcpyAsync(&kept, pos + n, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  KeptVoxels out;
  out.xyz = Tensor::empty({kept, 3}, DType::Int32, dev, stream);
  out.offsets = Tensor::empty({num_grids + 1}, DType::Int64, dev, stream);
  kept_scatter_kernel<<<grid_stride_blocks(std::max(n, num_grids + 1), kThreads), kThreads, 0, s>>>(
      xyz, voxel_offsets, num_grids, n, keep, pos, static_cast<int32_t*>(out.xyz.data()),
      static_cast<int64_t*>(out.offsets.data()));
  TG_CUDA_CHECK_LAUNCH();
  return out;
}

void ijk_to_index(const TreeView& tree, const int32_t* xyz, const int64_t* joffsets,
                  int64_t num_tensors, int64_t n, int64_t* out, int device, Stream stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device);
  ijk_to_index_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0,
                        static_cast<cudaStream_t>(stream.handle)>>>(tree, xyz, joffsets,
                                                                    num_tensors, n, out);
  TG_CUDA_CHECK_LAUNCH();
}

void active_ijk(const LeafNode* leaves, int64_t num_leaves, int32_t* xyz, int device,
                Stream stream) {
  if (num_leaves == 0) return;
  CudaDeviceGuard guard(device);
  active_ijk_kernel<<<grid_stride_blocks(num_leaves * ChildMask<kLeafLog2>::kChildren, kThreads),
                      kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(leaves, num_leaves,
                                                                               xyz);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
