#pragma once
// Sparse convolution on Hopper (sm_90a): the output-stationary implicit GEMM of sparse_conv.cu
// with the products on wgmma and the gathers on cp.async, several K steps in flight.
//  - A CTA owns 128 output rows x kBlockN output channels; two warpgroups of 64 rows each.
//  - At the tile's start it reads the kernel map of its 128 rows for every tap (at most
//    kMaxTaps = 27, i.e. 3x3x3; from the map in row order where given, contiguous reads) into
//    shared memory and keeps the taps that any row has: a
//    tile only multiplies the taps present in it. Rows sorted by their tap masks
//    (kernel_map_row_order) make the tiles' tap sets close to each row's own (9.5 of 27 taps
//    a row on a surface scene): the order is the caller's, `row_order[i]` being the output
//    row that the tile's i-th row computes (identity without one).
//  - The K loop runs over (tap present, 64 input channels); below 64 channels (8 to 32) a
//    step packs 2 to 8 taps side by side in its 64 channels. A step gathers 128 rows x 64
//    channels of the features (16-byte cp.async, zero-filled for absent rows and channels
//    past C_in) and the tap's 64 x kBlockN weight slice into one stage of a kStages ring,
//    both in the 128-byte swizzled layouts wgmma reads. kStages - 2 steps are loaded ahead:
//    a stage is refilled only after every warpgroup's wgmma of it completed (the wait for all
//    but the newest product, then the CTA barrier of the next step).
//  - Epilogue: float32 sums (through the ConvEpilogueArgs where given: folded BatchNorm,
//    residual, ReLU) rounded to the element type, stored as pairs straight from the
//    accumulators to the output rows.
// Forward: weight [taps, C_in, C_out] (the B operand N-major); input gradient
// (kTransposedWeight): weight [taps, C_out, C_in] applied transposed (B K-major).
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "grid/conv/sm90/sparse_conv_sm90.h"
#include "grid/conv/sm90/sparse_conv_sm90_copy.cuh"
#include "grid/conv/sm90/sparse_conv_sm90_params.h"
#include "hopper/wgmma.cuh"

namespace tilegrid::grid::sm90 {

using namespace cute;

template <class Element_, int kBlockN_, int kStages_, bool kTransposedWeight_>
struct ConvTraits {
  using Element = Element_;
  static constexpr int kBlockM = 128, kBlockN = kBlockN_, kBlockK = 64, kStages = kStages_;
  static constexpr int kAhead = kStages - 2;  // steps loaded ahead of the one multiplied
  static constexpr bool kTransposedWeight = kTransposedWeight_;
  static constexpr int kThreads = 256;
  static_assert(kStages >= 3, "a stage multiplied, one in flight on the tensor cores, one loading");
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using BlockK = Int<kBlockK>;
  using Stages = Int<kStages>;

  static constexpr GMMA::Major kMajorB = kTransposedWeight ? GMMA::Major::K : GMMA::Major::MN;
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, cute::Shape<_64, BlockN, BlockK>,
                           GMMA::Major::K, kMajorB>(),
      cute::Layout<cute::Shape<_2, _1, _1>>{}));
  // A (rows, channels, stage): 64 channels = one 128-byte swizzle row.
  using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             cute::Shape<BlockM, BlockK, Stages>{}));
  // B (output channels, input channels, stage).
  using SmemAtomB = std::conditional_t<kTransposedWeight, GMMA::Layout_K_SW128_Atom<Element>,
                                       GMMA::Layout_MN_SW128_Atom<Element>>;
  using SmemLayoutB = decltype(tile_to_shape(SmemAtomB{}, cute::Shape<BlockN, BlockK, Stages>{}));

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutA>> a;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutB>> b;
    int32_t map[kMaxTaps][kBlockM];  // input row of each (tap, tile row); -1 absent
    int32_t out_rows[kBlockM];       // output row of each tile row; -1 past the end
    int32_t taps[kMaxTaps];          // the taps present in the tile, in order
    uint32_t mask;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

template <class Traits, int kMinBlocks>
__global__ void __launch_bounds__(Traits::kThreads, kMinBlocks)
    sparse_conv_sm90_kernel(const __grid_constant__ ConvKernelParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Element = typename Traits::Element;
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kBlockK = Traits::kBlockK;
  constexpr int kStages = Traits::kStages, kAhead = Traits::kAhead;
  constexpr int kThreads = Traits::kThreads;
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_bytes);
  auto sA = make_tensor(make_smem_ptr(smem.a.data()), typename Traits::SmemLayoutA{});
  auto sB = make_tensor(make_smem_ptr(smem.b.data()), typename Traits::SmemLayoutB{});

  const int tid = int(threadIdx.x), lane = tid % 32;
  const int64_t row_tile = int64_t(blockIdx.x) / p.col_tiles;
  const int64_t row0 = row_tile * kBlockM;
  const int64_t col0 = int64_t(blockIdx.x % p.col_tiles) * kBlockN;
  const auto* features = static_cast<const Element*>(p.features);
  const auto* weight = static_cast<const Element*>(p.weight);
  const int64_t cin = p.cin, cout = p.cout;

  // The tile's rows, their map entries and the taps present. A thread takes one row (tid %
  // kBlockM) and every kRowThreads-th tap from tid / kBlockM on, and issues all its map reads
  // before it uses one, so that they are in flight together. (Read one after the other, a
  // memory latency each, they made a cost a tile that did not depend on C: the forward took
  // 0.29 ms at 32 channels and 0.30 ms at 64 on the 485k-voxel scene.) With the map in row
  // order a warp's 32 reads of a tap are one contiguous 128 bytes.
  static_assert(kThreads % kBlockM == 0, "a thread a row");
  constexpr int kRowThreads = kThreads / kBlockM;
  constexpr int kTapsAThread = (kMaxTaps + kRowThreads - 1) / kRowThreads;
  if (tid == 0) smem.mask = 0;
  const int volume = int(p.volume);
  const int tile_row = tid % kBlockM;
  const int64_t i = row0 + tile_row;
  int32_t o = i < p.rows ? (p.row_order != nullptr ? p.row_order[i] : int32_t(i)) : -1;
  if (o >= p.rows)
    o = -1;  // never written through (the orders kernel_map_row_order makes
             // are permutations)
  const bool in_order = p.map_in_row_order != nullptr;
  const bool row_in = in_order ? i < p.rows : o >= 0;
  const int32_t* column = !row_in ? p.map : in_order ? p.map_in_row_order + i : p.map + o;
  int32_t n[kTapsAThread];
  CUTE_UNROLL
  for (int j = 0; j < kTapsAThread; ++j) {
    const int t = tid / kBlockM + kRowThreads * j;
    n[j] = row_in && t < volume ? column[int64_t(t) * p.rows] : -1;
  }
  if (tid < kBlockM) smem.out_rows[tile_row] = o;
  __syncthreads();  // smem.mask is 0
  uint32_t present = 0;
  CUTE_UNROLL
  for (int j = 0; j < kTapsAThread; ++j) {
    const int t = tid / kBlockM + kRowThreads * j;
    if (n[j] >= p.feature_rows) n[j] = -1;
    if (t < volume) smem.map[t][tile_row] = n[j];
    if (n[j] >= 0) present |= 1u << t;
  }
  present = __reduce_or_sync(0xffffffffu, present);
  if (lane == 0 && present != 0) atomicOr(&smem.mask, present);
  __syncthreads();
  uint32_t mask = smem.mask;
  const int tap_count = __popc(mask);
  if (tid == 0)
    for (int s = 0; s < tap_count; ++s) {
      smem.taps[s] = __ffs(mask) - 1;
      mask &= mask - 1;
    }
  __syncthreads();

  // Taps a K step packs. Where C_in fills a fraction of a step's 64 channels, several taps
  // share one step: a step's channel k is channel k % width of its (k / width)-th tap, and the
  // weight rows follow the same order (C_in = 32: 2 taps a step, 16: 4, 8: 8). Unpacked, a
  // C_in of 32 left half of every step's products and shared memory zeros and took as long as
  // C_in = 64 (0.181 and 0.194 ms on the 485k-voxel scene, 14 steps a tile either way): the
  // steps, not the products, set the time at few channels.
  const int step_taps = cin <= 8 ? 8 : cin <= 16 ? 4 : cin <= 32 ? 2 : 1;
  const int tap_shift = cin <= 8 ? 3 : cin <= 16 ? 4 : cin <= 32 ? 5 : 6;
  const int tap_width = 1 << tap_shift;  // channels of one tap in a step: kBlockK / step_taps
  const int k_chunks = step_taps > 1 ? 1 : int((cin + kBlockK - 1) / kBlockK);
  const int steps = step_taps > 1 ? (tap_count + step_taps - 1) / step_taps : tap_count * k_chunks;

  // The steps are loaded in order, one call of load_next() each: a cursor (tap slot, chunk,
  // stage) moves on by one, with no division. What a thread copies is fixed but for the tap's
  // map entries, the chunk's channels and the stage, so its shared-memory destinations (the
  // stages are a fixed stride apart; the 128-byte swizzle stays inside a stage) and the
  // column part of its global sources are computed once. (Computed a step at a time, with a
  // division by the chunk count, the integer work bound the kernel: IMAD was a third of the
  // instructions and the issue slots 50% busy at 64 channels.)
  // A: 4 chunks a thread, rows tid / 8 + 32 j, channels 8 (tid % 8) of the step's 64: in a
  // packed step, channel a_channel % tap_width of the step's (a_channel / tap_width)-th tap.
  constexpr int kRowsA = kBlockM / 32;
  const int a_stage_stride = int(&sA(0, 0, 1) - &sA(0, 0, 0));
  const int a_channel = 8 * (tid % 8);
  const int a_tap = a_channel >> tap_shift, a_tap_channel = a_channel & (tap_width - 1);
  Element* a_dst[kRowsA];
  CUTE_UNROLL
  for (int j = 0; j < kRowsA; ++j) a_dst[j] = &sA(tid / 8 + 32 * j, a_channel, 0);
  const Element* a_src = features + a_tap_channel;
  // B: the tap's weight slice, 64 x kBlockN.
  constexpr int kChunksPerRowB = Traits::kTransposedWeight ? 8 : kBlockN / 8;
  constexpr int kRowsPerPassB = kThreads / kChunksPerRowB;
  constexpr int kPassesB = (Traits::kTransposedWeight ? kBlockN : kBlockK) / kRowsPerPassB;
  const int b_stage_stride = int(&sB(0, 0, 1) - &sB(0, 0, 0));
  const int b_chunk = 8 * (tid % kChunksPerRowB), b_row = tid / kChunksPerRowB;
  Element* b_dst[kPassesB];
  CUTE_UNROLL
  for (int j = 0; j < kPassesB; ++j)
    b_dst[j] = Traits::kTransposedWeight ? &sB(b_row + kRowsPerPassB * j, b_chunk, 0)
                                         : &sB(b_chunk, b_row + kRowsPerPassB * j, 0);
  int load_slot = 0, load_chunk = 0, load_stage = 0;
  auto load_next = [&]() {
    const int t = smem.taps[load_slot];
    const int64_t k0 = int64_t(load_chunk) * kBlockK;
    const int a_off = load_stage * a_stage_stride, b_off = load_stage * b_stage_stride;
    {
      const bool channel_in = k0 + a_channel < cin;
      CUTE_UNROLL
      for (int j = 0; j < kRowsA; ++j) {
        const int32_t n = smem.map[t][tid / 8 + 32 * j];
        const bool valid = n >= 0 && channel_in;
        cp_async_16(a_dst[j] + a_off, valid ? a_src + int64_t(n) * cin + k0 : features, valid);
      }
    }
    if constexpr (!Traits::kTransposedWeight) {
      // weight[t] is [cin][cout]: 64 rows of kBlockN / 8 chunks.
      const bool col_in = col0 + b_chunk < cout;
      const Element* src = weight + (int64_t(t) * cin + k0 + b_row) * cout + col0 + b_chunk;
      CUTE_UNROLL
      for (int j = 0; j < kPassesB; ++j) {
        const bool valid = col_in && k0 + b_row + kRowsPerPassB * j < cin;
        cp_async_16(b_dst[j] + b_off, valid ? src + int64_t(kRowsPerPassB * j) * cout : weight,
                    valid);
      }
    } else {
      // weight[t] is [cout][cin]: kBlockN rows of 8 chunks.
      const bool channel_in = k0 + b_chunk < cin;
      const Element* src = weight + (int64_t(t) * cout + col0 + b_row) * cin + k0 + b_chunk;
      CUTE_UNROLL
      for (int j = 0; j < kPassesB; ++j) {
        const bool valid = channel_in && col0 + b_row + kRowsPerPassB * j < cout;
        cp_async_16(b_dst[j] + b_off, valid ? src + int64_t(kRowsPerPassB * j) * cin : weight,
                    valid);
      }
    }
    if (++load_chunk == k_chunks) {
      load_chunk = 0;
      ++load_slot;
    }
    if (++load_stage == kStages) load_stage = 0;
  };
  // A packed step: taps load_slot .. load_slot + step_taps - 1 (those past the tile's last
  // tap load zeros), channels 0 .. tap_width - 1 of each.
  auto load_next_packed = [&]() {
    const int a_off = load_stage * a_stage_stride, b_off = load_stage * b_stage_stride;
    {
      const int slot = load_slot + a_tap;
      const bool channel_in = slot < tap_count && a_tap_channel < cin;
      const int t = smem.taps[channel_in ? slot : 0];
      CUTE_UNROLL
      for (int j = 0; j < kRowsA; ++j) {
        const int32_t n = smem.map[t][tid / 8 + 32 * j];
        const bool valid = n >= 0 && channel_in;
        cp_async_16(a_dst[j] + a_off, valid ? a_src + int64_t(n) * cin : features, valid);
      }
    }
    if constexpr (!Traits::kTransposedWeight) {
      // Step row k is row k % tap_width of weight[tap (k / tap_width)], [cin][cout].
      const bool col_in = col0 + b_chunk < cout;
      CUTE_UNROLL
      for (int j = 0; j < kPassesB; ++j) {
        const int k = b_row + kRowsPerPassB * j;
        const int slot = load_slot + (k >> tap_shift), channel = k & (tap_width - 1);
        const bool valid = col_in && slot < tap_count && channel < cin;
        const int t = smem.taps[valid ? slot : 0];
        cp_async_16(b_dst[j] + b_off,
                    valid ? weight + (int64_t(t) * cin + channel) * cout + col0 + b_chunk : weight,
                    valid);
      }
    } else {
      // Step chunk b_chunk is channels b_chunk % tap_width.. of weight[tap (b_chunk /
      // tap_width)], [cout][cin].
      const int slot = load_slot + (b_chunk >> tap_shift), channel = b_chunk & (tap_width - 1);
      const bool channel_in = slot < tap_count && channel < cin;
      const int t = smem.taps[channel_in ? slot : 0];
      const Element* src = weight + (int64_t(t) * cout + col0 + b_row) * cin + channel;
      CUTE_UNROLL
      for (int j = 0; j < kPassesB; ++j) {
        const bool valid = channel_in && col0 + b_row + kRowsPerPassB * j < cout;
        cp_async_16(b_dst[j] + b_off, valid ? src + int64_t(kRowsPerPassB * j) * cin : weight,
                    valid);
      }
    }
    load_slot += step_taps;
    if (++load_stage == kStages) load_stage = 0;
  };
  const bool packed = step_taps > 1;

  typename Traits::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  auto tCrA = thr.partition_fragment_A(sA);  // (MMA, 1, K/16, stages)
  auto tCrB = thr.partition_fragment_B(sB);
  auto acc = partition_fragment_C(mma, cute::Shape<BlockM, BlockN>{});
  clear(acc);
  mma.accumulate_ = GMMA::ScaleOut::One;

  CUTE_UNROLL
  for (int it = 0; it < kAhead; ++it) {
    if (it < steps) packed ? load_next_packed() : load_next();
    cp_async_fence();
  }
  for (int it = 0; it < steps; ++it) {
    cp_async_wait<kAhead - 1>();               // this thread's copies of step `it` have landed
    cutlass::arch::fence_view_async_shared();  // ... and are visible to wgmma (async proxy)
    __syncthreads();            // every thread's; and every product of step it - 2 has completed
    if (it + kAhead < steps) {  // step it + kAhead, into step it - 2's stage
      if (packed)
        load_next_packed();
      else
        load_next();
    }
    cp_async_fence();
    const int stage = it % kStages;
    hopper::wgmma<false>(mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), acc);
    warpgroup_wait<1>();  // step it - 1's product has completed
    warpgroup_fence_operand(acc);
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);

  // Value i of the accumulator is (row, column) tCcC(i); i even and i + 1 are neighbouring
  // columns, one 32-bit store (C_out is a multiple of 8, so both are in range together).
  auto tCcC = thr.partition_C(make_identity_tensor(cute::Shape<BlockM, BlockN>{}));
  auto* out = static_cast<Element*>(p.out);
  const ConvEpilogueArgs& epilogue = p.epilogue;
  const bool apply = epilogue.any();
  const auto* residual = static_cast<const Element*>(epilogue.residual);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const int r = get<0>(tCcC(i));
    const int64_t col = col0 + get<1>(tCcC(i));
    const int32_t o = smem.out_rows[r];
    if (o < 0 || col >= cout) continue;
    float v0 = acc(i), v1 = acc(i + 1);
    if (apply) {
      float r0 = 0.f, r1 = 0.f;
      if (residual != nullptr) {
        const auto skip = *reinterpret_cast<const cutlass::AlignedArray<Element, 2>*>(
            residual + int64_t(o) * cout + col);
        r0 = float(skip[0]);
        r1 = float(skip[1]);
      }
      v0 = epilogue.apply(v0, col, r0);
      v1 = epilogue.apply(v1, col + 1, r1);
    }
    cutlass::AlignedArray<Element, 2> pair;
    pair[0] = Element(v0);
    pair[1] = Element(v1);
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(out + int64_t(o) * cout + col) = pair;
  }
#endif
}

}  // namespace tilegrid::grid::sm90
