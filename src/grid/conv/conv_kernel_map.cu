// The convolution's grid and maps on the GPU: the candidates one thread a (voxel, tap), the map
// one thread an output voxel over its taps, running the tap arithmetic (conv_taps.h) and the
// tree lookup (CachedLookup, index_tree.h) that the CPU runs.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/conv/conv_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

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

// A kernel that tiles its stride (kernel size = stride, not transposed: a U-Net's 2x2x2
// downsampling) sends each input through exactly one tap per axis, to floor((i + pad) /
// stride): one candidate an input, its parent (pad 0 for K = 2, 1 for K = 4). The quotient
// fits int32: pad < stride where pad > 0.
__global__ void parent_candidates_kernel(const int32_t* __restrict__ xyz, int64_t n, Taps taps,
                                         int32_t* __restrict__ out) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < 3 * n;
       p += int64_t(gridDim.x) * blockDim.x) {
    out[p] = taps.parent_of(xyz[p], int(p % 3));
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
// kernel_map_by_leaf_kernel keeps them: word w (the i-plane of 8 x 8 voxels at i = w) of slot
// ((di + 1) * 3 + dj + 1) * 3 + dk + 1 at words[slot * 8 + w].
struct NeighbourLeaves {
  struct Word {
    uint64_t bits;       // 0 where there is no leaf, so that no tap finds a voxel in it
    int32_t row_before;  // first_voxel + before[w] - 1 (rows are int32: kernel_map checks)
    int32_t unused;
  };
  Word words[27 * 8];     // a tap's mask word and row at one address
  int16_t position[512];  // the target leaf's active positions, in row order
};

// Row (pi, pj, pk) of the target leaf over its taps: tap t's entry at out[t * n_out], and its
// tap mask returned (bit t: the tap finds a voxel, for t below Key's bits; the sort key of
// kernel_map_row_order). The taps run as three nested loops, so t = (di * Kj + dj) * Kk + dk
// counts up as Taps::split numbers them, and each axis's part of a tap's word index and bit is
// found once an index of its loop: no division of t. A tap is ~17 instructions and no branch
// (sm_90 SASS), against ~150 with Taps::split's three 64-bit divisions (a reciprocal sequence
// each at best), most of this kernel's issue slots before. K: the kernel size in every axis,
// its pad K / 2, known at compile time (3: the 27 taps unrolled, the axes' parts computed once
// a row); 0: taps'.
template <int K, typename Key>
__device__ Key leaf_row_map(const NeighbourLeaves& near, int pi, int pj, int pk, const Taps& taps,
                            int32_t* out, int64_t n_out) {
  const int size_i = K ? K : taps.size[0], size_j = K ? K : taps.size[1];
  const int size_k = K ? K : taps.size[2];
  const int pad_i = K ? K / 2 : taps.pad[0], pad_j = K ? K / 2 : taps.pad[1];
  const int pad_k = K ? K / 2 : taps.pad[2];
  Key key = 0;
  int t = 0;
#pragma unroll(K ? K : 1)
  for (int di = 0; di < size_i; ++di) {
    // x in [-8, 16) (leaf_map_applies): the slot's index on the axis (x >> 3) + 1 (arithmetic
    // shift: 0, 1 or 2), the voxel's x & 7 (its word); likewise y and z, its bit (y & 7) * 8
    // + (z & 7).
    const int x = pi + di - pad_i, word_i = ((x >> 3) + 1) * 72 + (x & 7);
#pragma unroll(K ? K : 1)
    for (int dj = 0; dj < size_j; ++dj) {
      const int y = pj + dj - pad_j, word_ij = word_i + ((y >> 3) + 1) * 24;
      const int shift_j = 63 - ((y & 7) << 3);
#pragma unroll(K ? K : 1)
      for (int dk = 0; dk < size_k; ++dk, ++t, out += n_out) {
        const int z = pk + dk - pad_k;
        const NeighbourLeaves::Word& word = near.words[word_ij + ((z >> 3) + 1) * 8];
        // The word's bits up to the voxel's, shifted to the top: the voxel's bit is the sign,
        // and the popcount is the voxel's rank among the active ones, plus one.
        const uint64_t upto = word.bits << (shift_j - (z & 7));
        const bool found = int32_t(upto >> 32) < 0;
        *out = found ? word.row_before + popcount64(upto) : -1;
        if (t < int(8 * sizeof(Key))) key |= Key(found) << t;
      }
    }
  }
  return key;
}

// One CTA a target leaf. A stencil's inputs all lie in the 27 leaves around its output's leaf,
// so they are found once a leaf (27 tree walks for up to 512 outputs) and each tap of each
// output is then a bit test and a popcount in shared memory. Threads take the leaf's outputs
// in row order, so each tap's stores are runs of consecutive rows.
// 64 threads a CTA: with the taps cheap (leaf_row_map) a CTA's life is mostly the walkers'
// ~6 dependent loads down the tree, so the kernel goes as fast as leaves are in flight:
// 64-thread CTAs at <= 40 registers (ptxas, sm_90) put 25 leaves on an SM, where 128-thread
// ones at 64 registers put 8 (46.8% achieved occupancy); a surface leaf's ~73 rows still keep
// 64 threads busy, and its 27 walkers are 42% of them, not 21%. Writing the map (52 MB for a
// 485k-voxel scene, ~17 us at ~3 TB/s) is then most of what is left.
// Where keys is not null, also keys[row] = the row's tap mask and values[row] = row: the input
// of kernel_map_row_order's sort, made here from the bits in hand instead of by a second pass
// over the map (row_keys_kernel: 18.7 us reading the 52 MB map of a 485k-voxel scene).
constexpr int kLeafThreads = 64;

template <int K, typename Key>
__global__ void __launch_bounds__(kLeafThreads)
    kernel_map_by_leaf_kernel(TreeView source, const LeafNode* __restrict__ leaves,
                              int64_t num_leaves, const int64_t* __restrict__ target_offsets,
                              int64_t num_grids, int64_t n_out, Taps taps,
                              int32_t* __restrict__ map, Key* __restrict__ keys,
                              int32_t* __restrict__ values) {
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
      for (int w = 0; w < 8; ++w)
        near.words[s * 8 + w] = {n ? n->voxels.bits[w] : 0,
                                 n ? int32_t(n->first_voxel + n->voxels.before[w]) - 1 : 0, 0};
    }
    // The positions in row order: a thread a byte of the leaf's mask (64 bytes, one each), its
    // set bits in turn from the byte's rank (instead of a test and a rank a position: 512).
    for (int e = int(threadIdx.x); e < 64; e += int(blockDim.x)) {
      const int w = e >> 3, shift = (e & 7) * 8;
      const uint64_t word = leaf.voxels.bits[w];
      int rank = int(leaf.voxels.before[w]) + popcount64(word & ((uint64_t(1) << shift) - 1));
      for (uint32_t byte = uint32_t(word >> shift) & 0xffu; byte != 0; byte &= byte - 1)
        near.position[rank++] = int16_t(w * 64 + shift + __ffs(int(byte)) - 1);
    }
    __syncthreads();
    const int count = int(leaf.voxels.before[7]) + popcount64(leaf.voxels.bits[7]);
    for (int r = int(threadIdx.x); r < count; r += int(blockDim.x)) {
      const int p = near.position[r];
      const int64_t row = leaf.first_voxel + r;
      const Key key =
          leaf_row_map<K, Key>(near, p >> 6, (p >> 3) & 7, p & 7, taps, map + row, n_out);
      if (keys != nullptr) {
        keys[row] = key;
        values[row] = int32_t(row);
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

// keys[o] = the bits t < Key's bits of (map[t][o] >= 0); values[o] = o: the sort's input where
// the leaf kernel did not make it with the map.
template <typename Key>
__global__ void row_keys_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t n_out,
                                Key* __restrict__ keys, int32_t* __restrict__ values) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    Key key = 0;
    for (int64_t t = 0; t < volume && t < int64_t(8 * sizeof(Key)); ++t)
      if (map[t * n_out + o] >= 0) key |= Key(1) << t;
    keys[o] = key;
    values[o] = int32_t(o);
  }
}

// out[t][i] = map[t][order[i]]: a thread an output row i over its taps. A warp's store of a tap
// is 32 consecutive ints (one 128-byte line); its loads are 32 gathered ints, a 32-byte sector
// each wherever its rows lie apart in the map (the rows of one tap mask are increasing in the
// sorted order but spread over the grid). Those sectors are the cost: 27 a row, ~420 MB for a
// 485k-voxel scene's 13M entries, which L2 serves in about the 75 us that a thread an (i, t)
// took. A thread a row reads order[i] once (not once a tap), splits no element index into
// (t, i) (a 64-bit division and remainder an entry before), and keeps its taps' independent
// loads in flight together; but it gathers the same sectors.
// keys (or null): the sorted keys, bit t of keys[i] set where map[t][order[i]] >= 0 (t below
// Key's bits) and that entry -1 where not, as in the maps kernel_map_by_leaf and kernel_map
// build. An absent entry is then written -1 unread: a surface row has 9.5 of its 27 taps, so
// it gathers 9.5 sectors instead of 27 (~150 MB instead of ~420 MB). The keys are the sort's
// output, already in order: 4 bytes a row. A warp's rows mostly share one mask (they are
// sorted by it), so a tap's loads are skipped by the whole warp at once.
template <typename Key>
__global__ void map_in_row_order_kernel(const int32_t* __restrict__ map,
                                        const int32_t* __restrict__ order,
                                        const Key* __restrict__ keys, int64_t volume, int64_t n_out,
                                        int32_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_out;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t o = order[i];
    const bool in_range = o >= 0 && o < n_out;  // a GPU kernel skips order's entries out of range
    const Key present = keys != nullptr ? keys[i] : ~Key(0);
    const int32_t* from = map + (in_range ? o : 0);
    int32_t* to = out + i;
#pragma unroll 9
    for (int64_t t = 0; t < volume; ++t, from += n_out, to += n_out)
      *to = in_range && (t >= int64_t(8 * sizeof(Key)) || ((present >> t) & 1u)) ? *from : -1;
  }
}

// kernel_map_row_order into `order`, and kernel_map_in_row_order into `ordered` where that is
// not null, once make_keys(keys, values) has queued the sort's input on the stream (keys[o] =
// row o's tap mask, values[o] = o).
template <typename Key, typename MakeKeys>
void sort_rows(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order, int32_t* ordered,
               int device, Stream stream, MakeKeys make_keys) {
  const cudaStream_t s = raw(stream);
  const Device where = Device::cuda(device);
  // keys in, keys out, the iota values.
  Tensor keys = Tensor::empty({2 * n_out * int64_t(sizeof(Key))}, DType::UInt8, where, stream);
  Tensor values = Tensor::empty({n_out}, DType::Int32, where, stream);
  auto* keys_in = static_cast<Key*>(keys.data());
  auto* keys_out = keys_in + n_out;
  auto* values_in = static_cast<int32_t*>(values.data());
  make_keys(keys_in, values_in);
  // LSD radix sort: stable, over the bits the taps use.
  const int end_bit = int(std::min<int64_t>(std::max<int64_t>(volume, 1), 8 * sizeof(Key)));
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, values_in, order,
                                                n_out, 0, end_bit, s));
  Tensor temp = Tensor::empty({int64_t(std::max<size_t>(bytes, 1))}, DType::UInt8, where, stream);
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, keys_in, keys_out, values_in,
                                                order, n_out, 0, end_bit, s));
  if (ordered != nullptr) {
    map_in_row_order_kernel<<<grid_stride_blocks(n_out, kThreads), kThreads, 0, s>>>(
        map, order, keys_out, volume, n_out, ordered);
    TG_CUDA_CHECK_LAUNCH();
  }
}

// sort_rows with 32-bit keys where the volume is <= 32 (a 3x3x3 kernel's 27 taps): each of the
// sort's four 8-bit passes then moves 4 + 4 bytes a row each way instead of 8 + 4 (10.6 us a
// pass on a 485k-voxel scene with 64-bit keys), over the same bits, so to the same order.
// make_keys is called with a Key* and an int32_t*.
template <typename MakeKeys>
void order_rows(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order, int32_t* ordered,
                int device, Stream stream, MakeKeys make_keys) {
  if (volume <= 32)
    sort_rows<uint32_t>(map, volume, n_out, order, ordered, device, stream, make_keys);
  else
    sort_rows<uint64_t>(map, volume, n_out, order, ordered, device, stream, make_keys);
}

// kernel_map_by_leaf_kernel with the taps unrolled where the kernel is 3x3x3 (pads 1), its keys
// and values as it takes them (null: the map alone).
template <typename Key>
void launch_by_leaf(const TreeView& source, const LeafNode* leaves, int64_t num_leaves,
                    const int64_t* target_offsets, int64_t num_grids, int64_t n_out,
                    const Taps& taps, int32_t* map, Key* keys, int32_t* values, cudaStream_t s) {
  const unsigned blocks = unsigned(std::min<int64_t>(num_leaves, 1 << 20));
  if constexpr (sizeof(Key) == 4) {  // 27 taps take 32-bit keys (order_rows)
    bool centred3 = true;
    for (int a = 0; a < 3; ++a) centred3 = centred3 && taps.size[a] == 3 && taps.pad[a] == 1;
    if (centred3) {
      kernel_map_by_leaf_kernel<3, Key><<<blocks, kLeafThreads, 0, s>>>(
          source, leaves, num_leaves, target_offsets, num_grids, n_out, taps, map, keys, values);
      TG_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  kernel_map_by_leaf_kernel<0, Key><<<blocks, kLeafThreads, 0, s>>>(
      source, leaves, num_leaves, target_offsets, num_grids, n_out, taps, map, keys, values);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool conv_candidates(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids, int64_t n,
                     const Taps& taps, int device, Stream stream, ConvCandidates& out) {
  CudaDeviceGuard guard(device);
  const cudaStream_t s = raw(stream);
  const Device dev = Device::cuda(device);
  if (taps.tiles_its_stride()) {
    // As many candidates as inputs, in the inputs' grids: no flags, scan or read-back (each
    // of a U-Net's coarser grids waited on one).
    out.xyz = Tensor::empty({n, 3}, DType::Int32, dev, stream);
    out.offsets = Tensor::empty({num_grids + 1}, DType::Int64, dev, stream);
    TG_CUDA_CHECK(cudaMemcpyAsync(out.offsets.data(), voxel_offsets,
                                  sizeof(int64_t) * size_t(num_grids + 1),
                                  cudaMemcpyDeviceToDevice, s));
    if (n > 0) {
      parent_candidates_kernel<<<grid_stride_blocks(3 * n, kThreads), kThreads, 0, s>>>(
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
    candidate_flags_kernel<<<grid_stride_blocks(total, kThreads), kThreads, 0, s>>>(
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
  candidate_scatter_kernel<<<grid_stride_blocks(std::max<int64_t>(total, 1), kThreads), kThreads, 0,
                             s>>>(xyz, voxel_offsets, num_grids, n, taps, f, pos,
                                  static_cast<int32_t*>(out.xyz.data()),
                                  static_cast<int64_t*>(out.offsets.data()));
  TG_CUDA_CHECK_LAUNCH();
  return true;
}

void kernel_map(const TreeView& source, const int32_t* target_xyz, const int64_t* target_offsets,
                int64_t num_grids, int64_t n_out, const Taps& taps, int32_t* map, int device,
                Stream stream) {
  if (n_out == 0) return;
  CudaDeviceGuard guard(device);
  kernel_map_kernel<<<grid_stride_blocks(n_out, kThreads), kThreads, 0, raw(stream)>>>(
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
                        const Taps& taps, int32_t* map, int32_t* order, int32_t* ordered,
                        int device, Stream stream) {
  if (num_leaves == 0 || n_out == 0) return;
  CudaDeviceGuard guard(device);
  const cudaStream_t s = raw(stream);
  if (order == nullptr) {
    launch_by_leaf<uint32_t>(source, target_leaves, num_leaves, target_offsets, num_grids, n_out,
                             taps, map, nullptr, nullptr, s);
    return;
  }
  order_rows(map, taps.volume, n_out, order, ordered, device, stream,
             [&](auto* keys, int32_t* values) {
               launch_by_leaf(source, target_leaves, num_leaves, target_offsets, num_grids, n_out,
                              taps, map, keys, values, s);
             });
}

void invert_kernel_map(const int32_t* map, int64_t volume, int64_t n_out, int64_t n_in,
                       int32_t* inverse, int device, Stream stream) {
  if (volume * n_in == 0) return;
  CudaDeviceGuard guard(device);
  fill_kernel<<<grid_stride_blocks(volume * n_in, kThreads), kThreads, 0, raw(stream)>>>(
      inverse, volume * n_in, -1);
  TG_CUDA_CHECK_LAUNCH();
  if (volume * n_out == 0) return;
  invert_kernel<<<grid_stride_blocks(volume * n_out, kThreads), kThreads, 0, raw(stream)>>>(
      map, volume, n_out, n_in, inverse);
  TG_CUDA_CHECK_LAUNCH();
}

void kernel_map_row_order(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order,
                          int32_t* ordered, int device, Stream stream) {
  if (n_out == 0) return;
  CudaDeviceGuard guard(device);
  order_rows(map, volume, n_out, order, ordered, device, stream, [&](auto* keys, int32_t* values) {
    row_keys_kernel<<<grid_stride_blocks(n_out, kThreads), kThreads, 0, raw(stream)>>>(
        map, volume, n_out, keys, values);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void kernel_map_in_row_order(const int32_t* map, const int32_t* order, int64_t volume,
                             int64_t n_out, int32_t* out, int device, Stream stream) {
  if (volume * n_out == 0) return;
  CudaDeviceGuard guard(device);
  map_in_row_order_kernel<uint32_t>
      <<<grid_stride_blocks(n_out, kThreads), kThreads, 0, raw(stream)>>>(map, order, nullptr,
                                                                          volume, n_out, out);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
