#pragma once
// Pieces of the portable (mma.sync) attention kernels that the forward and the backward share
// (internal): guarded tile loads, the reuse of an accumulator as an A operand, quad
// reductions, and the swizzled shared-memory tiles.
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>

#include <type_traits>

namespace tilegrid::attention::flash {

using namespace cute;

// The m16n8k16 tensor-core product with fp32 accumulation for a 16-bit element type.
template <class Element>
using Mma16816 = std::conditional_t<std::is_same_v<Element, cutlass::bfloat16_t>,
                                    SM80_16x8x16_F32BF16BF16F32_TN, SM80_16x8x16_F32F16F16F32_TN>;

// Copies the rows of a (CPY, rows, cols) partition whose tile row is below `valid_rows` and
// zero-fills the others: a K row past the sequence would only be masked, but a V row past it
// meets P = 0, and 0 x NaN garbage would poison O.
template <class TiledCopy, class Src, class Dst, class Coords>
__device__ __forceinline__ void load_rows(const TiledCopy& tiled_copy, const Src& src, Dst&& dst,
                                          const Coords& coords, int valid_rows) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(src); ++m) {
    if (get<0>(coords(0, m, 0)) < valid_rows)
      copy(tiled_copy, src(_, m, _), dst(_, m, _));
    else
      clear(dst(_, m, _));
  }
}

// The C fragment of two neighbouring n8 MMAs holds exactly the A fragment of one k16 MMA
// (rows g and g + 8, columns 2t, 2t + 1 and 2t + 8, 2t + 9): regroup ((2,2), M, N) as
// (((2,2),2), M, N/2) so that P feeds the second product without leaving registers.
template <class Layout>
__device__ __forceinline__ auto c_layout_as_a(Layout c) {
  auto l = logical_divide(c, Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// A (rows x cols) 16-bit tile in shared memory, in chunks of 64 columns (128 bytes, 8 16-byte
// units; XOR swizzle over 8 rows) or of 32 when cols is not a multiple of 64 (64 bytes, 4
// units over 4 row pairs), so that the 8 rows one ldmatrix phase reads fall into distinct
// banks.
template <int kCols>
using SmemAtom = decltype(composition(
    Swizzle<kCols % 64 == 0 ? 3 : 2, 3, 3>{},
    Layout<Shape<_8, Int<kCols % 64 == 0 ? 64 : 32>>, Stride<Int<kCols % 64 == 0 ? 64 : 32>, _1>>{}));

template <int kRows, int kCols>
using SmemTile = decltype(tile_to_shape(SmemAtom<kCols>{}, Shape<Int<kRows>, Int<kCols>>{}));

// The same memory read as its transpose, (cols x rows): the B operand of a product whose
// reduction runs along the tile's rows (P V in the forward; P^T dO, dS^T Q, dS K backward).
template <int kRows, int kCols>
using SmemTileTransposed = decltype(composition(
    SmemTile<kRows, kCols>{}, make_layout(Shape<Int<kCols>, Int<kRows>>{}, GenRowMajor{})));

// Global -> shared copies of 16-bit rows of kCols elements: 16 bytes a thread, a row chunk
// (64 or 32 columns, as SmemAtom) per kCols-chunk / 8 threads.
template <class Element, int kThreads, int kCols>
using GmemRowCopy = decltype(make_tiled_copy(
    Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{},
    Layout<Shape<Int<kThreads / ((kCols % 64 == 0 ? 64 : 32) / 8)>,
                 Int<(kCols % 64 == 0 ? 64 : 32) / 8>>,
           Stride<Int<(kCols % 64 == 0 ? 64 : 32) / 8>, _1>>{},
    Layout<Shape<_1, _8>>{}));

// acc += A B^T for A (M x K) and B (N x K) tiles in shared memory, fed to the tensor cores
// one k16 slice at a time through ldmatrix (CopyA / CopyB: the ldmatrix atom that reads
// each operand, transposing or not).
template <class CopyA, class CopyB, class TiledMma, class Acc, class SmemA, class SmemB>
__device__ __forceinline__ void gemm_smem(const TiledMma& mma, Acc& acc, const SmemA& sA,
                                          const SmemB& sB, int tid) {
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rA = thr_mma.partition_fragment_A(sA);  // (MMA, MMA_M, MMA_K)
  Tensor rB = thr_mma.partition_fragment_B(sB);  // (MMA, MMA_N, MMA_K)
  auto copy_a = make_tiled_copy_A(Copy_Atom<CopyA, typename SmemA::value_type>{}, mma);
  auto copy_b = make_tiled_copy_B(Copy_Atom<CopyB, typename SmemB::value_type>{}, mma);
  auto thr_a = copy_a.get_thread_slice(tid);
  auto thr_b = copy_b.get_thread_slice(tid);
  Tensor tAsA = thr_a.partition_S(sA);
  Tensor tArA = thr_a.retile_D(rA);
  Tensor tBsB = thr_b.partition_S(sB);
  Tensor tBrB = thr_b.retile_D(rB);
  CUTE_UNROLL
  for (int k = 0; k < size<2>(rA); ++k) {
    copy(copy_a, tAsA(_, _, k), tArA(_, _, k));
    copy(copy_b, tBsB(_, _, k), tBrB(_, _, k));
    gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// acc += A B^T for A already in registers (an A-layout fragment, (MMA, MMA_M, MMA_K)) and B
// in shared memory.
template <class CopyB, class TiledMma, class Acc, class FragA, class SmemB>
__device__ __forceinline__ void gemm_rs(const TiledMma& mma, Acc& acc, const FragA& rA,
                                        const SmemB& sB, int tid) {
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rB = thr_mma.partition_fragment_B(sB);
  auto copy_b = make_tiled_copy_B(Copy_Atom<CopyB, typename SmemB::value_type>{}, mma);
  auto thr_b = copy_b.get_thread_slice(tid);
  Tensor tBsB = thr_b.partition_S(sB);
  Tensor tBrB = thr_b.retile_D(rB);
  CUTE_UNROLL
  for (int k = 0; k < size<2>(rA); ++k) {
    copy(copy_b, tBsB(_, _, k), tBrB(_, _, k));
    gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

}  // namespace tilegrid::attention::flash
