// CUDA lookups over a GridBatch's tree: one thread a coordinate (or a leaf voxel), running the
// traversal the CPU path runs (TreeView::index_of).
#include "core/cuda_check.h"
#include "grid/grid_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20));
}

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

}  // namespace

void ijk_to_index(const TreeView& tree, const int32_t* xyz, const int64_t* joffsets,
                  int64_t num_tensors, int64_t n, int64_t* out, int device, Stream stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device);
  ijk_to_index_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      tree, xyz, joffsets, num_tensors, n, out);
  TG_CUDA_CHECK_LAUNCH();
}

void active_ijk(const LeafNode* leaves, int64_t num_leaves, int32_t* xyz, int device,
                Stream stream) {
  if (num_leaves == 0) return;
  CudaDeviceGuard guard(device);
  active_ijk_kernel<<<blocks_for(num_leaves * ChildMask<kLeafLog2>::kChildren), kThreads, 0,
                      static_cast<cudaStream_t>(stream.handle)>>>(leaves, num_leaves, xyz);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
