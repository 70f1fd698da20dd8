#pragma once
// Warpgroup matrix products on Hopper (internal, sm_90a): the issue of one CuTe wgmma product
// over its k-blocks, and the regrouping that feeds an accumulator back in as the register A
// operand of the next product. Shared by the attention forward and backward kernels.
#include <cute/tensor.hpp>

namespace tilegrid::hopper {

// Issues one warpgroup product C (+)= A B over every k-block; the caller commits and waits.
template <bool kZeroInit, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma(TiledMma& mma, const TA& a, const TB& b, TC& c) {
  using namespace cute;
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
}

// The wgmma accumulator of a 64 x N tile, ((2, 2, N/8), M, 1) per thread (columns 2t, 2t+1 +
// 8j of rows g and g+8), holds exactly the A-register fragment of the k16 blocks of the next
// product, ((2, 2, 2), M, N/16): regroup the N/8 mode in pairs.
template <class Layout>
__device__ __forceinline__ auto acc_as_a_operand(Layout acc) {
  using namespace cute;
  auto v = logical_divide(get<0>(acc), cute::Shape<Underscore, Underscore, _2>{});  // (2,2,(2,N/16))
  return make_layout(make_layout(get<0>(v), get<1>(v), get<2, 0>(v)), get<1>(acc), get<2, 1>(v));
}

}  // namespace tilegrid::hopper
