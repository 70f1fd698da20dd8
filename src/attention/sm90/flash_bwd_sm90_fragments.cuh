#pragma once
// Register fragments of the Hopper attention backward (internal, sm_90a): the float32 score
// fragments converted to 16 bits, and dS^T written to shared memory for the dQ product.
// Both kernels (flash_bwd_sm90_kernel.cuh, flash_bwd_sm90_wide_kernel.cuh) form P^T and dS^T
// in float32 accumulators and need them as 16-bit register operands and as a shared tile.
#include <cutlass/numeric_conversion.h>
#include <cute/tensor.hpp>

namespace tilegrid::attention::sm90_bwd {

// Sets values i and i + 1 (i even) of a 16-bit register fragment with a compact layout (an
// accumulator's) from two floats in one conversion (one F2FP.PACK_AB). Converting value by
// value made ptxas pack the pairs in another order and spend a PRMT a pair regrouping them.
template <class Fragment>
__device__ __forceinline__ void set_pair(Fragment& fragment, int i, float first, float second) {
  using Element = typename Fragment::value_type;
  cutlass::NumericArrayConverter<Element, float, 2> convert;
  cutlass::Array<float, 2> pair;
  pair[0] = first;
  pair[1] = second;
  *reinterpret_cast<cutlass::Array<Element, 2>*>(fragment.data() + i) = convert(pair);
}

// Writes a thread's (keys, queries) fragment of a product's accumulator into a shared tile
// whose queries are contiguous, with stmatrix (four 8 x 8 matrices an instruction). The
// swizzle is applied to compile-time offsets from a 1024-byte-aligned base
// (as_position_independent_swizzle_tensor): storing through the tile's swizzled pointer
// instead computed the swizzle and a 64-bit generic address at run time for every 32-bit
// store (about 150 instructions a step at head dim 128).
template <class Element, class TiledMma>
struct ScoreTileStore {
  using Copy = decltype(cute::make_tiled_copy_C(
      cute::Copy_Atom<cute::SM90_U32x4_STSM_N, Element>{}, TiledMma{}));

  // The thread's slice of `tile` (keys, queries[, buffers]), for every buffer.
  template <class SmemTensor>
  __device__ __forceinline__ static auto partition(int thread, SmemTensor&& tile) {
    return Copy{}.get_thread_slice(thread).partition_D(
        cute::as_position_independent_swizzle_tensor(tile));
  }
  template <class Fragment, class Destination>
  __device__ __forceinline__ static void store(int thread, const Fragment& values,
                                               Destination&& destination) {
    auto thread_copy = Copy{}.get_thread_slice(thread);
    cute::copy(Copy{}, thread_copy.retile_S(values), destination);
  }
};

}  // namespace tilegrid::attention::sm90_bwd
