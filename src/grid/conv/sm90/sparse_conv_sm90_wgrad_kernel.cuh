#pragma once
// Sparse convolution weight gradient on Hopper (sm_90a): for each tap t,
//     grad_weight[t] = sum over outputs o with map[t][o] >= 0 of features[map[t][o]]^T grad_out[o],
// a GEMM of C_in x C_out over the tap's (input, output) pairs, on wgmma.
//  - The K dimension is steps of 64 output rows in the row order of the forward
//    (kernel_map_row_order: rows sorted by their tap masks), and only the steps that hold a
//    pair of tap t (sparse_conv_sm90_steps.cu lists them, with each row's (input, output)):
//    with the rows so sorted, a tap's steps are nearly full or empty, so the products run over
//    little more than the pairs themselves (9.5 of 27 taps a row on a surface scene).
//  - A CTA owns a kBlockM x kBlockN tile of one tap's gradient and an equal share (`chunk`) of
//    the tap's steps; float32 partial sums per chunk, added in chunk order afterwards, so the
//    result is the same bits on every run.
//  - A step: 64 gathered feature rows (the A operand, channels contiguous: MN-major) and the
//    64 grad_out rows (B, MN-major) by 16-byte cp.async, zero-filled past the channels and for
//    absent pairs, into a kStages ring; kStages - 2 steps loaded ahead, as in the forward
//    (sparse_conv_sm90_kernel.cuh). Each thread's (input, output) rows of the next step are
//    read one step early into registers, so the copies wait on no index load.
//  - Tiles: 128 x 128 (the two warpgroups split C_in) where C_in is a multiple of 128; else
//    64 x 64, the two warpgroups splitting C_out into halves of 32 (B in 64-byte swizzled
//    rows, so that a half is whole swizzle atoms). Both warpgroups multiply in either case:
//    with one multiplying behind a branch, ptxas could not keep a product in flight across
//    the branch and waited for every product (its C7517 notice).
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "grid/conv/sm90/sparse_conv_sm90_copy.cuh"
#include "grid/conv/sm90/sparse_conv_sm90_params.h"
#include "hopper/wgmma.cuh"

namespace tilegrid::grid::sm90 {

using namespace cute;

// kTile64s: the tile is 64 kTile64s x 64 kTile64s (1 or 2).
template <class Element_, int kTile64s_, int kStages_>
struct WgradTraits {
  using Element = Element_;
  static constexpr int kTile64s = kTile64s_;
  static_assert(kTile64s == 1 || kTile64s == 2);
  static constexpr int kBlockM = 64 * kTile64s, kBlockN = 64 * kTile64s;
  static constexpr int kBlockK = 64;  // output rows a step
  static constexpr int kStages = kStages_, kAhead = kStages - 2;
  static constexpr int kThreads = 256;
  static_assert(kStages >= 3, "a stage multiplied, one in flight on the tensor cores, one loading");
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using BlockK = Int<kBlockK>;
  using Stages = Int<kStages>;
  // The two warpgroups along C_in (128 x 128) or along C_out (64 x 64).
  static constexpr int kWarpgroupsM = kTile64s, kWarpgroupsN = 2 / kTile64s;
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float,
                           cute::Shape<_64, Int<kBlockN / kWarpgroupsN>, BlockK>,
                           GMMA::Major::MN, GMMA::Major::MN>(),
      cute::Layout<cute::Shape<Int<kWarpgroupsM>, Int<kWarpgroupsN>, _1>>{}));
  using AtomB = std::conditional_t<kWarpgroupsN == 2, GMMA::Layout_MN_SW64_Atom<Element>,
                                   GMMA::Layout_MN_SW128_Atom<Element>>;
  // (input channels, rows, stage) and (output channels, rows, stage), channels contiguous.
  using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                                             cute::Shape<BlockM, BlockK, Stages>{}));
  using SmemLayoutB =
      decltype(tile_to_shape(AtomB{}, cute::Shape<BlockN, BlockK, Stages>{}));
  // A thread's rows of a step: chunk tid % (kBlockM / 8) of rows tid / (kBlockM / 8) + j *
  // kRowStride (the same rows for A and B, since kBlockM = kBlockN).
  static constexpr int kChunksPerRow = kBlockM / 8, kRowStride = kThreads / kChunksPerRow;
  static constexpr int kRowsPerThread = kBlockK / kRowStride;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutA>> a;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutB>> b;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

// Grid (m_tiles * n_tiles, volume, chunks).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sparse_conv_sm90_wgrad_kernel(const __grid_constant__ WgradKernelParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Element = typename Traits::Element;
  using BlockM = typename Traits::BlockM;
  using BlockN = typename Traits::BlockN;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kBlockK = Traits::kBlockK;
  constexpr int kStages = Traits::kStages, kAhead = Traits::kAhead;
  constexpr int kRows = Traits::kRowsPerThread;
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_bytes);
  auto sA = make_tensor(make_smem_ptr(smem.a.data()), typename Traits::SmemLayoutA{});
  auto sB = make_tensor(make_smem_ptr(smem.b.data()), typename Traits::SmemLayoutB{});

  const int tid = int(threadIdx.x);
  const int64_t ci0 = int64_t(blockIdx.x / p.n_tiles) * kBlockM;
  const int64_t co0 = int64_t(blockIdx.x % p.n_tiles) * kBlockN;
  const int t = int(blockIdx.y), chunk = int(blockIdx.z);
  const int64_t cin = p.cin, cout = p.cout;
  const auto* features = static_cast<const Element*>(p.features);
  const auto* grad_out = static_cast<const Element*>(p.grad_out);

  // This chunk's share of the tap's steps.
  const int begin = p.tap_begin[t], count = p.tap_begin[t + 1] - begin;
  const int per = (count + p.chunks - 1) / p.chunks;
  const int first = begin + min(count, chunk * per);
  const int steps = begin + min(count, (chunk + 1) * per) - first;

  const int c = tid % Traits::kChunksPerRow;
  const bool ci_in = ci0 + c * 8 < cin, co_in = co0 + c * 8 < cout;
  int2 next[kRows];  // (input, output) rows of this thread for the next step to load
  auto read_pairs = [&](int it) {
    CUTE_UNROLL
    for (int j = 0; j < kRows; ++j)
      next[j] = it < steps ? p.pairs[int64_t(first + it) * kBlockK + tid / Traits::kChunksPerRow +
                                     j * Traits::kRowStride]
                           : make_int2(-1, -1);
  };
  auto load = [&](int it) {
    const int stage = it % kStages;
    CUTE_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int r = tid / Traits::kChunksPerRow + j * Traits::kRowStride;
      const int32_t n = next[j].x, o = next[j].y;
      const bool a_valid = n >= 0 && ci_in, b_valid = n >= 0 && o >= 0 && co_in;
      cp_async_16(&sA(c * 8, r, stage), a_valid ? features + int64_t(n) * cin + ci0 + c * 8 : features,
                  a_valid);
      cp_async_16(&sB(c * 8, r, stage), b_valid ? grad_out + int64_t(o) * cout + co0 + c * 8 : grad_out,
                  b_valid);
    }
  };

  typename Traits::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  auto tCrA = thr.partition_fragment_A(sA);  // (MMA, 1, K/16, stages)
  auto tCrB = thr.partition_fragment_B(sB);
  auto acc = partition_fragment_C(mma, cute::Shape<BlockM, BlockN>{});
  clear(acc);
  mma.accumulate_ = GMMA::ScaleOut::One;

  read_pairs(0);
  CUTE_UNROLL
  for (int it = 0; it < kAhead; ++it) {
    if (it < steps) {
      load(it);
      read_pairs(it + 1);
    }
    cp_async_fence();
  }
  for (int it = 0; it < steps; ++it) {
    cp_async_wait<kAhead - 1>();               // this thread's copies of step `it` landed
    cutlass::arch::fence_view_async_shared();  // ... and are visible to wgmma
    __syncthreads();  // every thread's; and every product of step it - 2 has completed
    if (it + kAhead < steps) {
      load(it + kAhead);  // into step it - 2's stage
      read_pairs(it + kAhead + 1);
    }
    cp_async_fence();
    const int stage = it % kStages;
    hopper::wgmma<false>(mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), acc);
    warpgroup_wait<1>();  // step it - 1's product has completed
    warpgroup_fence_operand(acc);
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);

  // Every element of the tile is written (zeros for a chunk without steps): the chunk sums
  // read them all.
  auto tCcC = thr.partition_C(make_identity_tensor(cute::Shape<BlockM, BlockN>{}));
  float* tile = p.partials + (int64_t(chunk) * p.volume + t) * cin * cout;
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const int64_t ci = ci0 + get<0>(tCcC(i)), co = co0 + get<1>(tCcC(i));
    if (ci >= cin || co >= cout) continue;
    *reinterpret_cast<float2*>(tile + ci * cout + co) = make_float2(acc(i), acc(i + 1));
  }
#endif
}

}  // namespace tilegrid::grid::sm90
