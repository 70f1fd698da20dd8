// GPU construction of a GridBatch from integer coordinates, parallel end to end; the same
// tree as the CPU builder (build_from_ijk_cpu.cpp), which the GPU tests compare it with:
//  1. one key per coordinate: (grid, upper-node origin, position in the upper node, position
//     in the lower node, position in the leaf), whose order is the tree order. The full key
//     has 128 bits; when the batch's grids and upper-node origins fit in 28 bits (measured by
//     a min/max pass: any batch under 2^28 grids x 4096^3-voxel extents does), a 64-bit key
//     with origins relative to the minimum is sorted instead, and only over its used bits —
//     e.g. 5 radix passes instead of 16 for one grid spanning 2 upper nodes an axis;
//  2. CUB radix sort of the keys and CUB unique: the active voxels, in feature-row order;
//  3. flags where a new upper node, lower node or leaf starts, exclusive scans of the flags:
//     every voxel learns the index of its nodes, and nodes come out contiguous per parent;
//  4. one thread a voxel writes node origins and first-child indices and sets mask bits
//     (atomicOr), one thread a node computes the running popcounts, one thread a grid finds
//     its ranges by binary search. Three scalars come back to the host (the counts).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda/std/tuple>

#include <algorithm>
#include <climits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_copy.h"
#include "core/cuda_grid_stride.h"
#include "grid/grid_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kRootBias = int64_t(1) << 19;  // root coordinates (i >> 12) span 20 bits

// hi: grid (24 bits) | root i (20) | root j (20); lo: root k (20) | upper position (15) |
// lower position (12) | leaf position (9).
struct TreeKey {
  uint64_t hi, lo;
  __host__ __device__ bool operator==(const TreeKey& o) const { return hi == o.hi && lo == o.lo; }
};

struct TreeKeyDecomposer {
  __host__ __device__ ::cuda::std::tuple<uint64_t&, uint64_t&> operator()(TreeKey& k) const {
    return {k.hi, k.lo};
  }
};

__device__ uint64_t grid_of(const TreeKey& k) {
  return k.hi >> 40;
}
// Same grid and same upper node: everything above the position in the upper node agrees.
__device__ bool same_root(const TreeKey& a, const TreeKey& b) {
  return a.hi == b.hi && (a.lo >> 36) == (b.lo >> 36);
}
__device__ uint32_t upper_position(const TreeKey& k) {
  return uint32_t(k.lo >> 21) & 0x7fff;
}
__device__ uint32_t lower_position(const TreeKey& k) {
  return uint32_t(k.lo >> 9) & 0xfff;
}
__device__ uint32_t leaf_position(const TreeKey& k) {
  return uint32_t(k.lo) & 0x1ff;
}

__device__ Coord root_of(const TreeKey& k) {
  const int64_t ri = int64_t((k.hi >> 20) & 0xfffff) - kRootBias;
  const int64_t rj = int64_t(k.hi & 0xfffff) - kRootBias;
  const int64_t rk = int64_t(k.lo >> 36) - kRootBias;
  return {int32_t(ri * (1 << kRootShift)), int32_t(rj * (1 << kRootShift)),
          int32_t(rk * (1 << kRootShift))};
}

__device__ Coord offset_origin(Coord origin, uint32_t position, int shift, int log2) {
  const uint32_t m = (1u << log2) - 1;
  return {origin.i + int32_t(((position >> (2 * log2)) & m) << shift),
          origin.j + int32_t(((position >> log2) & m) << shift),
          origin.k + int32_t((position & m) << shift)};
}

// Position in the upper node (15 bits) | in the lower node (12) | in the leaf (9).
__device__ uint64_t in_node_position(Coord c) {
  return (uint64_t(child_position(c, kUpperShift, kUpperLog2)) << 21) |
         (uint64_t(child_position(c, kLowerShift, kLowerLog2)) << 9) |
         uint64_t(child_position(c, 0, kLeafLog2));
}

__global__ void make_keys(const int32_t* __restrict__ xyz, const int64_t* __restrict__ joffsets,
                          int64_t num_grids, int64_t n, TreeKey* __restrict__ keys) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const Coord c = {xyz[3 * p], xyz[3 * p + 1], xyz[3 * p + 2]};
    const uint64_t b = uint64_t(tensor_of_row(joffsets, num_grids, p));
    const uint64_t ri = uint64_t(int64_t(c.i >> kRootShift) + kRootBias);
    const uint64_t rj = uint64_t(int64_t(c.j >> kRootShift) + kRootBias);
    const uint64_t rk = uint64_t(int64_t(c.k >> kRootShift) + kRootBias);
    keys[p].hi = (b << 40) | (ri << 20) | rj;
    keys[p].lo = (rk << 36) | in_node_position(c);
  }
}

// Bits of a voxel's position inside its upper node: upper (15) + lower (12) + leaf (9).
constexpr int kInNodeBits = 3 * (kUpperLog2 + kLowerLog2 + kLeafLog2);

// Per-axis minimum and maximum of the upper-node coordinates (c >> 12) of all points:
// bounds[0..2] minima, bounds[3..5] maxima (initialised to INT_MAX / INT_MIN).
__global__ void root_bounds(const int32_t* __restrict__ xyz, int64_t n, int* __restrict__ bounds) {
  int lo[3] = {INT_MAX, INT_MAX, INT_MAX}, hi[3] = {INT_MIN, INT_MIN, INT_MIN};
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x)
    for (int a = 0; a < 3; ++a) {
      const int r = xyz[3 * p + a] >> kRootShift;
      lo[a] = min(lo[a], r);
      hi[a] = max(hi[a], r);
    }
  for (int a = 0; a < 3; ++a)
    for (int offset = 16; offset > 0; offset /= 2) {
      lo[a] = min(lo[a], __shfl_xor_sync(0xffffffffu, lo[a], offset));
      hi[a] = max(hi[a], __shfl_xor_sync(0xffffffffu, hi[a], offset));
    }
  if (threadIdx.x % 32 == 0)
    for (int a = 0; a < 3; ++a) {
      atomicMin(&bounds[a], lo[a]);
      atomicMax(&bounds[3 + a], hi[a]);
    }
}

// The 64-bit key: grid | (root i - min) | (root j - min) | (root k - min) | in-node position,
// the fields `width` bits wide (grid, i, j, k). Same order as TreeKey, since each field is
// shifted by a constant.
struct CompactLayout {
  int min_root[3];
  int width[4];  // grid, i, j, k
  int total_bits() const { return width[0] + width[1] + width[2] + width[3] + kInNodeBits; }
};

__global__ void make_compact_keys(const int32_t* __restrict__ xyz,
                                  const int64_t* __restrict__ joffsets, int64_t num_grids,
                                  int64_t n, CompactLayout layout, uint64_t* __restrict__ keys) {
  const int shift_k = kInNodeBits, shift_j = shift_k + layout.width[3];
  const int shift_i = shift_j + layout.width[2], shift_b = shift_i + layout.width[1];
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const Coord c = {xyz[3 * p], xyz[3 * p + 1], xyz[3 * p + 2]};
    const uint64_t b = uint64_t(tensor_of_row(joffsets, num_grids, p));
    keys[p] = (layout.width[0] ? b << shift_b : 0) |
              (uint64_t((c.i >> kRootShift) - layout.min_root[0]) << shift_i) |
              (uint64_t((c.j >> kRootShift) - layout.min_root[1]) << shift_j) |
              (uint64_t((c.k >> kRootShift) - layout.min_root[2]) << shift_k) |
              in_node_position(c);
  }
}

// The full TreeKey of each unique compact key, for the node-building passes.
// The first *count keys (count on the device: launched over an upper bound, no read-back).
__global__ void expand_compact_keys(const uint64_t* __restrict__ compact,
                                    const int64_t* __restrict__ count, CompactLayout layout,
                                    TreeKey* __restrict__ keys) {
  const int64_t n = *count;
  const int shift_k = kInNodeBits, shift_j = shift_k + layout.width[3];
  const int shift_i = shift_j + layout.width[2], shift_b = shift_i + layout.width[1];
  auto field = [](uint64_t key, int shift, int width) {
    return width == 0 ? uint64_t(0) : (key >> shift) & ((uint64_t(1) << width) - 1);
  };
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n;
       v += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t key = compact[v];
    const uint64_t b = field(key, shift_b, layout.width[0]);
    const uint64_t ri = uint64_t(int64_t(field(key, shift_i, layout.width[1])) +
                                 layout.min_root[0] + kRootBias);
    const uint64_t rj = uint64_t(int64_t(field(key, shift_j, layout.width[2])) +
                                 layout.min_root[1] + kRootBias);
    const uint64_t rk = uint64_t(int64_t(field(key, shift_k, layout.width[3])) +
                                 layout.min_root[2] + kRootBias);
    keys[v].hi = (b << 40) | (ri << 20) | rj;
    keys[v].lo = (rk << 36) | (key & ((uint64_t(1) << kInNodeBits) - 1));
  }
}

// flags[v] = 1 where voxel v starts a new upper node / lower node / leaf.
// Over `bound` entries, the first *count of them voxels (the count stays on the device): the
// entries past the voxels are flagged 0, so the scans over all `bound` count the nodes.
__global__ void node_starts(const TreeKey* __restrict__ voxels, const int64_t* __restrict__ count,
                            int64_t bound, int64_t* __restrict__ new_upper,
                            int64_t* __restrict__ new_lower, int64_t* __restrict__ new_leaf) {
  const int64_t n = *count;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < bound;
       v += int64_t(gridDim.x) * blockDim.x) {
    if (v >= n) {
      new_upper[v] = new_lower[v] = new_leaf[v] = 0;
      continue;
    }
    const TreeKey& k = voxels[v];
    const bool upper = v == 0 || !same_root(voxels[v - 1], k);
    const bool lower = upper || upper_position(voxels[v - 1]) != upper_position(k);
    const bool leaf = lower || lower_position(voxels[v - 1]) != lower_position(k);
    new_upper[v] = upper;
    new_lower[v] = lower;
    new_leaf[v] = leaf;
  }
}

// ids are exclusive scans of the flags: a voxel that starts a node holds that node's index,
// and every voxel's node is (inclusive count - 1) = id + flag - 1.
__global__ void fill_nodes(const TreeKey* __restrict__ voxels, int64_t n,
                           const int64_t* __restrict__ new_upper,
                           const int64_t* __restrict__ new_lower,
                           const int64_t* __restrict__ new_leaf,
                           const int64_t* __restrict__ upper_id,
                           const int64_t* __restrict__ lower_id,
                           const int64_t* __restrict__ leaf_id, UpperNode* uppers,
                           LowerNode* lowers, LeafNode* leaves, int64_t* __restrict__ upper_grid) {
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n;
       v += int64_t(gridDim.x) * blockDim.x) {
    const TreeKey& k = voxels[v];
    const int64_t u = upper_id[v] + new_upper[v] - 1;
    const int64_t l = lower_id[v] + new_lower[v] - 1;
    const int64_t f = leaf_id[v] + new_leaf[v] - 1;
    const Coord root = root_of(k);
    const Coord lower_origin = offset_origin(root, upper_position(k), kUpperShift, kUpperLog2);
    if (new_upper[v]) {
      uppers[u].origin = root;
      uppers[u].first_lower = l;
      upper_grid[u] = int64_t(grid_of(k));
    }
    if (new_lower[v]) {
      lowers[l].origin = lower_origin;
      lowers[l].first_leaf = f;
      const uint32_t pos = upper_position(k);
      atomicOr(reinterpret_cast<unsigned long long*>(&uppers[u].lowers.bits[pos >> 6]),
               1ull << (pos & 63));
    }
    if (new_leaf[v]) {
      leaves[f].origin = offset_origin(lower_origin, lower_position(k), kLowerShift, kLowerLog2);
      leaves[f].first_voxel = v;
      const uint32_t pos = lower_position(k);
      atomicOr(reinterpret_cast<unsigned long long*>(&lowers[l].leaves.bits[pos >> 6]),
               1ull << (pos & 63));
    }
    const uint32_t pos = leaf_position(k);
    atomicOr(reinterpret_cast<unsigned long long*>(&leaves[f].voxels.bits[pos >> 6]),
             1ull << (pos & 63));
  }
}

__device__ ChildMask<kUpperLog2>& mask_of(UpperNode& node) {
  return node.lowers;
}
__device__ ChildMask<kLowerLog2>& mask_of(LowerNode& node) {
  return node.leaves;
}
__device__ ChildMask<kLeafLog2>& mask_of(LeafNode& node) {
  return node.voxels;
}

// counts = {upper, lower and leaf nodes, voxels}: the scans' totals over all `bound` entries
// (past the voxels every flag is 0), and the voxel count, for one read-back.
__global__ void count_nodes(const int64_t* f0, const int64_t* f1, const int64_t* f2,
                            const int64_t* i0, const int64_t* i1, const int64_t* i2,
                            const int64_t* voxel_count, int64_t bound, int64_t* counts) {
  if (threadIdx.x == 0) {
    counts[0] = i0[bound - 1] + f0[bound - 1];
    counts[1] = i1[bound - 1] + f1[bound - 1];
    counts[2] = i2[bound - 1] + f2[bound - 1];
    counts[3] = *voxel_count;
  }
}

// One warp a node: the running popcounts of its child mask. Each lane counts the bits of its
// share of the words, a warp scan turns those counts into the lane's starting value, and the
// lane writes its words' running counts. (One thread a node took 36 us for one upper node's
// 512 words on an H200: a serial tail after the tree's other kernels.)
template <class Node>
__global__ void finish_masks(Node* nodes, int64_t count) {
  using Mask = std::remove_reference_t<decltype(mask_of(std::declval<Node&>()))>;
  constexpr int kPerLane = (Mask::kWords + 31) / 32;
  const int lane = int(threadIdx.x & 31);
  const int first = lane * kPerLane;
  const int last = first + kPerLane < Mask::kWords ? first + kPerLane : Mask::kWords;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  // i is the same for the 32 lanes of a warp, so every lane takes the shuffles together.
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; i < count; i += warps) {
    auto& mask = mask_of(nodes[i]);
    uint32_t mine = 0;
    for (int w = first; w < last; ++w) mine += uint32_t(__popcll(mask.bits[w]));
    uint32_t running = mine;  // inclusive scan over the lanes
    for (int d = 1; d < 32; d <<= 1) {
      const uint32_t below = __shfl_up_sync(0xffffffffu, running, d);
      if (lane >= d) running += below;
    }
    running -= mine;
    for (int w = first; w < last; ++w) {
      mask.before[w] = running;
      running += uint32_t(__popcll(mask.bits[w]));
    }
  }
}

// offsets[b] = first index whose grid is >= b (grids sorted ascending), for b in [0, B].
__global__ void grid_ranges(const int64_t* __restrict__ grid_of_item, int64_t items,
                            int64_t num_grids, int64_t* __restrict__ offsets) {
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b <= num_grids;
       b += int64_t(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = items;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (grid_of_item[mid] < b)
        lo = mid + 1;
      else
        hi = mid;
    }
    offsets[b] = lo;
  }
}

__global__ void voxel_grids(const TreeKey* __restrict__ voxels, int64_t n,
                            int64_t* __restrict__ grid) {
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n;
       v += int64_t(gridDim.x) * blockDim.x)
    grid[v] = int64_t(grid_of(voxels[v]));
}

// Scratch from the default allocator (PyTorch's under Python), released in stream order.
struct Scratch {
  std::vector<Tensor> held;
  int device;
  Stream stream;
  template <class T>
  T* get(int64_t count) {
    held.push_back(Tensor::empty({std::max<int64_t>(count, 1) * int64_t(sizeof(T))}, DType::UInt8,
                                 Device::cuda(device), stream));
    return static_cast<T*>(held.back().data());
  }
};

// The 64-bit key layout for these points, or nothing when grid and origins need more than 28
// bits (then the full 128-bit key is sorted). One small reduction and one read-back.
std::optional<CompactLayout> compact_layout(const int32_t* xyz, int64_t n, int64_t num_grids,
                                            Scratch& scratch, cudaStream_t s) {
  int* bounds = scratch.get<int>(6);
  const int init[6] = {INT_MAX, INT_MAX, INT_MAX, INT_MIN, INT_MIN, INT_MIN};
  ::tilegrid::cuda::copy_small_to_device(bounds, init, sizeof(init), scratch.device, scratch.stream);
  root_bounds<<<std::min(grid_stride_blocks(n, kThreads), 4u * 132u), kThreads, 0, s>>>(xyz, n,
                                                                                        bounds);
  TG_CUDA_CHECK_LAUNCH();
  int host[6];
  TG_CUDA_CHECK(cudaMemcpyAsync(host, bounds, sizeof(host), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  auto bits_for = [](int64_t span) {  // bits to hold values 0..span
    int bits = 0;
    while (bits < 63 && (int64_t(1) << bits) <= span) ++bits;
    return bits;
  };
  CompactLayout layout{};
  layout.width[0] = bits_for(num_grids - 1);
  for (int a = 0; a < 3; ++a) {
    layout.min_root[a] = host[a];
    layout.width[1 + a] = bits_for(int64_t(host[3 + a]) - host[a]);
  }
  if (layout.total_bits() > 64) return std::nullopt;
  return layout;
}

// Sorted unique voxels from 64-bit keys, expanded to TreeKeys; their count into
// *num_voxels_dev (on the device).
void sort_unique_compact(const int32_t* xyz, const int64_t* joffsets, int64_t num_grids,
                         int64_t n, const CompactLayout& layout, Scratch& scratch,
                         TreeKey* voxels, int64_t* num_voxels_dev, cudaStream_t s) {
  uint64_t* keys = scratch.get<uint64_t>(n);
  uint64_t* sorted = scratch.get<uint64_t>(n);
  make_compact_keys<<<grid_stride_blocks(n, kThreads), kThreads, 0, s>>>(xyz, joffsets, num_grids,
                                                                         n, layout, keys);
  TG_CUDA_CHECK_LAUNCH();
  const int end_bit = std::max(layout.total_bits(), 1);
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, sorted, n, 0, end_bit, s));
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(scratch.get<uint8_t>(int64_t(bytes)), bytes, keys,
                                               sorted, n, 0, end_bit, s));
  uint64_t* unique = keys;  // the unsorted keys are no longer needed
  bytes = 0;
  TG_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, bytes, sorted, unique, num_voxels_dev, n, s));
  TG_CUDA_CHECK(cub::DeviceSelect::Unique(scratch.get<uint8_t>(int64_t(bytes)), bytes, sorted,
                                          unique, num_voxels_dev, n, s));
  expand_compact_keys<<<grid_stride_blocks(n, kThreads), kThreads, 0, s>>>(unique, num_voxels_dev,
                                                                           layout, voxels);
  TG_CUDA_CHECK_LAUNCH();
}

// Sorted unique voxels from full 128-bit keys; their count into *num_voxels_dev (on the
// device).
void sort_unique_full(const int32_t* xyz, const int64_t* joffsets, int64_t num_grids, int64_t n,
                      Scratch& scratch, TreeKey* voxels, int64_t* num_voxels_dev,
                      cudaStream_t s) {
  TreeKey* keys = scratch.get<TreeKey>(n);
  TreeKey* sorted = scratch.get<TreeKey>(n);
  make_keys<<<grid_stride_blocks(n, kThreads), kThreads, 0, s>>>(xyz, joffsets, num_grids, n, keys);
  TG_CUDA_CHECK_LAUNCH();
  size_t bytes = 0;
  TG_CUDA_CHECK(
      cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, sorted, n, TreeKeyDecomposer{}, s));
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(scratch.get<uint8_t>(int64_t(bytes)), bytes, keys,
                                               sorted, n, TreeKeyDecomposer{}, s));
  bytes = 0;
  TG_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, bytes, sorted, voxels, num_voxels_dev, n, s));
  TG_CUDA_CHECK(cub::DeviceSelect::Unique(scratch.get<uint8_t>(int64_t(bytes)), bytes, sorted,
                                          voxels, num_voxels_dev, n, s));
}

}  // namespace

BuiltTree build_tree(const int32_t* xyz, const int64_t* joffsets, int64_t num_grids, int64_t n,
                     int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  Scratch scratch{{}, device, stream};
  BuiltTree out;

  // The voxels (sorted, unique) and their nodes are found over the n inputs, an upper bound of
  // the voxels, with the voxel count left on the device, so that the voxel and node counts
  // come back in one read-back (one stream synchronisation instead of two: a network's level
  // grids are built between kernels that then wait for the host).
  TreeKey* voxels = scratch.get<TreeKey>(n);
  int64_t* num_voxels_dev = scratch.get<int64_t>(1);
  int64_t counts[4] = {0, 0, 0, 0};  // upper, lower and leaf nodes, voxels
  int64_t* flags[3] = {scratch.get<int64_t>(n), scratch.get<int64_t>(n), scratch.get<int64_t>(n)};
  int64_t* ids[3] = {scratch.get<int64_t>(n), scratch.get<int64_t>(n), scratch.get<int64_t>(n)};
  if (n > 0) {
    const std::optional<CompactLayout> layout = compact_layout(xyz, n, num_grids, scratch, s);
    if (layout)
      sort_unique_compact(xyz, joffsets, num_grids, n, *layout, scratch, voxels, num_voxels_dev, s);
    else
      sort_unique_full(xyz, joffsets, num_grids, n, scratch, voxels, num_voxels_dev, s);
    node_starts<<<grid_stride_blocks(n, kThreads), kThreads, 0, s>>>(voxels, num_voxels_dev, n,
                                                                     flags[0], flags[1], flags[2]);
    TG_CUDA_CHECK_LAUNCH();
    for (int level = 0; level < 3; ++level) {
      size_t bytes = 0;
      TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, flags[level], ids[level], n, s));
      TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scratch.get<uint8_t>(int64_t(bytes)), bytes,
                                                  flags[level], ids[level], n, s));
    }
    int64_t* node_counts = scratch.get<int64_t>(4);
    count_nodes<<<1, 32, 0, s>>>(flags[0], flags[1], flags[2], ids[0], ids[1], ids[2],
                                 num_voxels_dev, n, node_counts);
    TG_CUDA_CHECK_LAUNCH();
    TG_CUDA_CHECK(cudaMemcpyAsync(counts, node_counts, sizeof(counts), cudaMemcpyDeviceToHost, s));
    TG_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  const int64_t v = counts[3];
  out.num_voxels = v;
  out.uppers = Tensor::empty({counts[0] * int64_t(sizeof(UpperNode))}, DType::UInt8,
                             Device::cuda(device), stream);
  out.lowers = Tensor::empty({counts[1] * int64_t(sizeof(LowerNode))}, DType::UInt8,
                             Device::cuda(device), stream);
  out.leaves = Tensor::empty({counts[2] * int64_t(sizeof(LeafNode))}, DType::UInt8,
                             Device::cuda(device), stream);
  for (Tensor* t : {&out.uppers, &out.lowers, &out.leaves})
    if (t->numel()) TG_CUDA_CHECK(cudaMemsetAsync(t->data(), 0, size_t(t->numel()), s));
  auto* uppers = static_cast<UpperNode*>(out.uppers.data());
  auto* lowers = static_cast<LowerNode*>(out.lowers.data());
  auto* leaves = static_cast<LeafNode*>(out.leaves.data());
  int64_t* upper_grid = scratch.get<int64_t>(counts[0]);
  int64_t* voxel_grid = scratch.get<int64_t>(v);
  if (v > 0) {
    fill_nodes<<<grid_stride_blocks(v, kThreads), kThreads, 0, s>>>(
        voxels, v, flags[0], flags[1], flags[2], ids[0], ids[1], ids[2], uppers, lowers, leaves,
        upper_grid);
    TG_CUDA_CHECK_LAUNCH();
    finish_masks<<<grid_stride_blocks(32 * counts[0], kThreads), kThreads, 0, s>>>(uppers,
                                                                                   counts[0]);
    finish_masks<<<grid_stride_blocks(32 * counts[1], kThreads), kThreads, 0, s>>>(lowers,
                                                                                   counts[1]);
    finish_masks<<<grid_stride_blocks(32 * counts[2], kThreads), kThreads, 0, s>>>(leaves,
                                                                                   counts[2]);
    voxel_grids<<<grid_stride_blocks(v, kThreads), kThreads, 0, s>>>(voxels, v, voxel_grid);
    TG_CUDA_CHECK_LAUNCH();
  }
  out.upper_offsets = Tensor::empty({num_grids + 1}, DType::Int64, Device::cuda(device), stream);
  out.voxel_offsets = Tensor::empty({num_grids + 1}, DType::Int64, Device::cuda(device), stream);
  grid_ranges<<<grid_stride_blocks(num_grids + 1, kThreads), kThreads, 0, s>>>(
      upper_grid, counts[0], num_grids, static_cast<int64_t*>(out.upper_offsets.data()));
  grid_ranges<<<grid_stride_blocks(num_grids + 1, kThreads), kThreads, 0, s>>>(
      voxel_grid, v, num_grids, static_cast<int64_t*>(out.voxel_offsets.data()));
  TG_CUDA_CHECK_LAUNCH();
  // No synchronisation here: scratch is released on return, and both allocators a Tensor
  // takes (cudaMallocAsync's pool, torch's caching allocator) free in stream order, so the
  // kernels above still own it until they finish.
  return out;
}

}  // namespace tilegrid::grid::cuda
