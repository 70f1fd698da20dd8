// The convolution's grid and maps on the GPU: the candidates one thread a (voxel, tap), the map
// one thread an output voxel over its taps, running the tap arithmetic (conv_taps.h) and the
// tree lookup (CachedLookup, index_tree.h) that the CPU runs.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "core/cuda_check.h"
#include "grid/conv_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20));
}

cudaStream_t raw(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}

// flags[p] = 1 where (voxel p / volume, tap p % volume) lands on an output; *overflow = 1
// where that output leaves int32.
__global__ void candidate_flags_kernel(const int32_t* __restrict__ xyz, int64_t n, Taps taps,
                                       int32_t* __restrict__ flags, int* __restrict__ overflow) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n * taps.volume;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = p / taps.volume;
    int64_t o[3];
    const bool lands =
        taps.output_of({xyz[3 * row], xyz[3 * row + 1], xyz[3 * row + 2]}, p % taps.volume, o);
    flags[p] = lands;
    if (lands)
      for (int a = 0; a < 3; ++a)
        if (o[a] < INT32_MIN || o[a] > INT32_MAX) *overflow = 1;
  }
}

// Writes each landing candidate at its scanned position; offsets[b] = position of grid b's
// first candidate (grid b's voxels are rows [voxel_offsets[b], voxel_offsets[b+1])).
__global__ void candidate_scatter_kernel(const int32_t* __restrict__ xyz,
                                         const int64_t* __restrict__ voxel_offsets,
                                         int64_t num_grids, int64_t n, Taps taps,
                                         const int32_t* __restrict__ flags,
                                         const int64_t* __restrict__ positions,
                                         int32_t* __restrict__ out, int64_t* __restrict__ offsets) {
  const int64_t total = n * taps.volume;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < total;
       p += int64_t(gridDim.x) * blockDim.x) {
    if (!flags[p]) continue;
    const int64_t row = p / taps.volume;
    int64_t o[3];
    taps.output_of({xyz[3 * row], xyz[3 * row + 1], xyz[3 * row + 2]}, p % taps.volume, o);
    for (int a = 0; a < 3; ++a) out[3 * positions[p] + a] = int32_t(o[a]);
  }
  if (blockIdx.x == 0)
    for (int64_t b = threadIdx.x; b <= num_grids; b += blockDim.x) {
      const int64_t first = voxel_offsets[b] * taps.volume;  // candidates before grid b
      offsets[b] =
          first < total ? positions[first] : (total ? positions[total - 1] + flags[total - 1] : 0);
    }
}

// A kernel that tiles its stride (kernel size = stride, no padding, not transposed: a U-Net's
// 2x2x2 downsampling) sends each input through exactly one tap per axis, to floor(i / stride):
// one candidate an input, its parent.
bool tiles_its_stride(const Taps& taps) {
  if (taps.transposed) return false;
  for (int a = 0; a < 3; ++a)
    if (taps.size[a] != taps.stride[a] || taps.pad[a] != 0) return false;
  return true;
}

__global__ void parent_candidates_kernel(const int32_t* __restrict__ xyz, int64_t n, Taps taps,
                                         int32_t* __restrict__ out) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < 3 * n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int32_t i = xyz[p], s = taps.stride[p % 3];
    out[p] = i >= 0 ? i / s : -((-int64_t(i) + s - 1) / s);  // floor, in int64 for INT32_MIN
  }
}

__global__ void kernel_map_kernel(TreeView source, const int32_t* __restrict__ target_xyz,
                                  const int64_t* __restrict__ target_offsets, int64_t num_grids,
                                  int64_t n_out, Taps taps, int32_t* __restrict__ map) {
  // A thread an output, its taps in turn through one cached lookup: a 3x3x3 stencil's inputs
  // mostly lie in the output's leaf (all 27 for 216 of a leaf's 512 positions) and nearly
  // always in its lower node, so most lookups read the leaf alone instead of walking the root
  // table, the upper and the lower node each. Consecutive threads take consecutive outputs:
  // each tap's stores are coalesced, and a warp's lookups share nodes.
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    const Coord out{target_xyz[3 * o], target_xyz[3 * o + 1], target_xyz[3 * o + 2]};
    CachedLookup lookup(source, tensor_of_row(target_offsets, num_grids, o));
    for (int64_t t = 0; t < taps.volume; ++t) {
      Coord in;
      map[t * n_out + o] = taps.input_of(out, t, in) ? int32_t(lookup.index_of(in)) : -1;
    }
  }
}

// The 27 source leaves around a target leaf (its own 8^3 block and the 26 next to it), as
// kernel_map_by_leaf_kernel keeps them: slot ((di + 1) * 3 + dj + 1) * 3 + dk + 1.
struct NeighbourLeaves {
  uint64_t bits[27][8];
  uint32_t before[27][8];
  int64_t first_voxel[27];  // -1: no leaf there
  int16_t position[512];    // the target leaf's active positions, in row order
};

// One CTA a target leaf. A 3x3x3 stencil's inputs all lie in the 27 leaves around its output's
// leaf, so they are found once a leaf (27 tree walks for up to 512 outputs) and each tap of
// each output is then a bit test and a popcount in shared memory. Threads take the leaf's
// outputs in row order, so each tap's stores are runs of consecutive rows.
__global__ void kernel_map_by_leaf_kernel(TreeView source, const LeafNode* __restrict__ leaves,
                                          int64_t num_leaves,
                                          const int64_t* __restrict__ target_offsets,
                                          int64_t num_grids, int64_t n_out, Taps taps,
                                          int32_t* __restrict__ map) {
  __shared__ NeighbourLeaves near;
  for (int64_t l = blockIdx.x; l < num_leaves; l += gridDim.x) {
    const LeafNode& leaf = leaves[l];
    const Coord o = leaf.origin;
    if (threadIdx.x < 27) {
      const int s = int(threadIdx.x);
      const int64_t c[3] = {int64_t(o.i) + 8 * (s / 9 - 1), int64_t(o.j) + 8 * (s / 3 % 3 - 1),
                            int64_t(o.k) + 8 * (s % 3 - 1)};
      const bool in_range = c[0] >= INT32_MIN && c[0] <= INT32_MAX && c[1] >= INT32_MIN &&
                            c[1] <= INT32_MAX && c[2] >= INT32_MIN && c[2] <= INT32_MAX;
      const LeafNode* n =
          in_range ? source.leaf_of(tensor_of_row(target_offsets, num_grids, leaf.first_voxel),
                                    {int32_t(c[0]), int32_t(c[1]), int32_t(c[2])})
                   : nullptr;
      near.first_voxel[s] = n ? n->first_voxel : -1;
      for (int w = 0; w < 8; ++w) {
        near.bits[s][w] = n ? n->voxels.bits[w] : 0;
        near.before[s][w] = n ? n->voxels.before[w] : 0;
      }
    }
    for (int p = int(threadIdx.x); p < 512; p += int(blockDim.x))
      if (leaf.voxels.test(uint32_t(p))) near.position[leaf.voxels.rank(uint32_t(p))] = int16_t(p);
    __syncthreads();
    const int count = int(leaf.voxels.before[7]) + popcount64(leaf.voxels.bits[7]);
    for (int r = int(threadIdx.x); r < count; r += int(blockDim.x)) {
      const int p = near.position[r];
      const int pos[3] = {p >> 6, (p >> 3) & 7, p & 7};
      const int64_t row = leaf.first_voxel + r;
      for (int64_t t = 0; t < taps.volume; ++t) {
        int32_t d[3];
        taps.split(t, d);
        int slot = 0, q = 0;
        for (int a = 0; a < 3; ++a) {
          const int x = pos[a] + d[a] - taps.pad[a];  // in [-8, 16): leaf_map_applies
          slot = slot * 3 + (x >> 3) + 1;             // arithmetic shift: -1, 0 or 1
          q = (q << 3) | (x & 7);
        }
        int32_t index = -1;
        if (near.first_voxel[slot] >= 0) {
          const uint64_t word = near.bits[slot][q >> 6];
          if ((word >> (q & 63)) & 1u)
            index = int32_t(near.first_voxel[slot] + near.before[slot][q >> 6] +
                            popcount64(word & ((uint64_t(1) << (q & 63)) - 1)));
        }
        map[t * n_out + row] = index;
      }
    }
    __syncthreads();  // `near` is refilled for the next leaf
  }
}

__global__ void fill_kernel(int32_t* __restrict__ out, int64_t n, int32_t value) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x)
    out[p] = value;
}

__global__ void invert_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t n_out,
                              int64_t n_in, int32_t* __restrict__ inverse) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < volume * n_out;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int32_t i = map[p];
    // One writer per (tap, input): a tap's map is one-to-one (convolution.h).
    if (i >= 0 && i < n_in) inverse[(p / n_out) * n_in + i] = int32_t(p % n_out);
  }
}

}  // namespace

bool conv_candidates(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids, int64_t n,
                     const Taps& taps, int device, Stream stream, ConvCandidates& out) {
  CudaDeviceGuard guard(device);
  const cudaStream_t s = raw(stream);
  const Device dev = Device::cuda(device);
  if (tiles_its_stride(taps)) {
    // As many candidates as inputs, in the inputs' grids: no flags, scan or read-back (each
    // of a U-Net's coarser grids waited on one).
    out.xyz = Tensor::empty({n, 3}, DType::Int32, dev, stream);
    out.offsets = Tensor::empty({num_grids + 1}, DType::Int64, dev, stream);
    TG_CUDA_CHECK(cudaMemcpyAsync(out.offsets.data(), voxel_offsets,
                                  sizeof(int64_t) * size_t(num_grids + 1),
                                  cudaMemcpyDeviceToDevice, s));
    if (n > 0) {
      parent_candidates_kernel<<<blocks_for(3 * n), kThreads, 0, s>>>(
          xyz, n, taps, static_cast<int32_t*>(out.xyz.data()));
      TG_CUDA_CHECK_LAUNCH();
    }
    return true;
  }
  const int64_t total = n * taps.volume;
  Tensor flags = Tensor::empty({std::max<int64_t>(total, 1)}, DType::Int32, dev, stream);
  Tensor positions = Tensor::empty({std::max<int64_t>(total, 1)}, DType::Int64, dev, stream);
  Tensor overflow = Tensor::empty({1}, DType::Int32, dev, stream);
  TG_CUDA_CHECK(cudaMemsetAsync(overflow.data(), 0, sizeof(int32_t), s));
  int32_t* f = static_cast<int32_t*>(flags.data());
  int64_t* pos = static_cast<int64_t*>(positions.data());
  if (total > 0) {
    candidate_flags_kernel<<<blocks_for(total), kThreads, 0, s>>>(
        xyz, n, taps, f, static_cast<int*>(overflow.data()));
    TG_CUDA_CHECK_LAUNCH();
    size_t bytes = 0;
    TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, f, pos, total, s));
    Tensor scratch = Tensor::empty({int64_t(bytes) + 1}, DType::UInt8, dev, stream);
    TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scratch.data(), bytes, f, pos, total, s));
  }
  // The candidate count and the overflow flag: one synchronisation (from_ijk needs the count).
  int64_t count = 0;
  int32_t overflowed = 0, last_flag = 0;
  if (total > 0) {
    TG_CUDA_CHECK(
        cudaMemcpyAsync(&count, pos + total - 1, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
    TG_CUDA_CHECK(
        cudaMemcpyAsync(&last_flag, f + total - 1, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  }
  TG_CUDA_CHECK(
      cudaMemcpyAsync(&overflowed, overflow.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  if (overflowed) return false;
  count += last_flag;
  out.xyz = Tensor::empty({count, 3}, DType::Int32, dev, stream);
  out.offsets = Tensor::empty({num_grids + 1}, DType::Int64, dev, stream);
  candidate_scatter_kernel<<<blocks_for(std::max<int64_t>(total, 1)), kThreads, 0, s>>>(
      xyz, voxel_offsets, num_grids, n, taps, f, pos, static_cast<int32_t*>(out.xyz.data()),
      static_cast<int64_t*>(out.offsets.data()));
  TG_CUDA_CHECK_LAUNCH();
  return true;
}

void kernel_map(const TreeView& source, const int32_t* target_xyz, const int64_t* target_offsets,
                int64_t num_grids, int64_t n_out, const Taps& taps, int32_t* map, int device,
                Stream stream) {
  if (n_out == 0) return;
  CudaDeviceGuard guard(device);
  kernel_map_kernel<<<blocks_for(n_out), kThreads, 0, raw(stream)>>>(
      source, target_xyz, target_offsets, num_grids, n_out, taps, map);
  TG_CUDA_CHECK_LAUNCH();
}

bool leaf_map_applies(const Taps& taps) {
  if (taps.transposed) return false;
  for (int a = 0; a < 3; ++a)  // inputs o + d - pad within one leaf of o's: [-8, 16)
    if (taps.stride[a] != 1 || taps.pad[a] > 8 || taps.size[a] - 1 - taps.pad[a] > 8) return false;
  return true;
}

void kernel_map_by_leaf(const TreeView& source, const LeafNode* target_leaves, int64_t num_leaves,
                        const int64_t* target_offsets, int64_t num_grids, int64_t n_out,
                        const Taps& taps, int32_t* map, int device, Stream stream) {
  if (num_leaves == 0 || n_out == 0) return;
  CudaDeviceGuard guard(device);
  // 128 threads: a surface leaf holds ~100 of its 512 voxels.
  const unsigned blocks = unsigned(std::min<int64_t>(num_leaves, 1 << 20));
  kernel_map_by_leaf_kernel<<<blocks, 128, 0, raw(stream)>>>(
      source, target_leaves, num_leaves, target_offsets, num_grids, n_out, taps, map);
  TG_CUDA_CHECK_LAUNCH();
}

void invert_kernel_map(const int32_t* map, int64_t volume, int64_t n_out, int64_t n_in,
                       int32_t* inverse, int device, Stream stream) {
  if (volume * n_in == 0) return;
  CudaDeviceGuard guard(device);
  fill_kernel<<<blocks_for(volume * n_in), kThreads, 0, raw(stream)>>>(inverse, volume * n_in, -1);
  TG_CUDA_CHECK_LAUNCH();
  if (volume * n_out == 0) return;
  invert_kernel<<<blocks_for(volume * n_out), kThreads, 0, raw(stream)>>>(map, volume, n_out, n_in,
                                                                          inverse);
  TG_CUDA_CHECK_LAUNCH();
}

// keys[o] = the bits t < 64 of (map[t][o] >= 0); values[o] = o.
__global__ void row_keys_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t n_out,
                                uint64_t* __restrict__ keys, int32_t* __restrict__ values) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    uint64_t key = 0;
    for (int64_t t = 0; t < volume && t < 64; ++t)
      if (map[t * n_out + o] >= 0) key |= uint64_t(1) << t;
    keys[o] = key;
    values[o] = int32_t(o);
  }
}

void kernel_map_row_order(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order,
                          int device, Stream stream) {
  if (n_out == 0) return;
  CudaDeviceGuard guard(device);
  const cudaStream_t s = raw(stream);
  const Device where = Device::cuda(device);
  // keys in, keys out, the iota values.
  Tensor keys = Tensor::empty({2 * n_out * int64_t(sizeof(uint64_t))}, DType::UInt8, where, stream);
  Tensor values = Tensor::empty({n_out}, DType::Int32, where, stream);
  auto* keys_in = static_cast<uint64_t*>(keys.data());
  auto* keys_out = keys_in + n_out;
  auto* values_in = static_cast<int32_t*>(values.data());
  row_keys_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(map, volume, n_out, keys_in, values_in);
  TG_CUDA_CHECK_LAUNCH();
  // LSD radix sort: stable, over the bits the taps use.
  const int end_bit = int(std::min<int64_t>(std::max<int64_t>(volume, 1), 64));
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, values_in, order,
                                                n_out, 0, end_bit, s));
  Tensor temp = Tensor::empty({int64_t(std::max<size_t>(bytes, 1))}, DType::UInt8, where, stream);
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, keys_in, keys_out, values_in,
                                                order, n_out, 0, end_bit, s));
}

// out[t][i] = map[t][order[i]]: a thread an (i, t) with i fastest, so the writes are
// contiguous and the order is read once a warp and tap.
__global__ void map_in_row_order_kernel(const int32_t* __restrict__ map,
                                        const int32_t* __restrict__ order, int64_t volume,
                                        int64_t n_out, int32_t* __restrict__ out) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < volume * n_out;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / n_out, i = e % n_out;
    const int32_t o = order[i];
    out[e] = o >= 0 && o < n_out ? map[t * n_out + o] : -1;
  }
}

void kernel_map_in_row_order(const int32_t* map, const int32_t* order, int64_t volume,
                             int64_t n_out, int32_t* out, int device, Stream stream) {
  if (volume * n_out == 0) return;
  CudaDeviceGuard guard(device);
  map_in_row_order_kernel<<<blocks_for(volume * n_out), kThreads, 0, raw(stream)>>>(
      map, order, volume, n_out, out);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
