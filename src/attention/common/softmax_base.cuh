#pragma once
// The exponent base of a softmax row in log2 units (internal, device code), and the exact
// exponent for rows whose base is too large for it.
//
// Every kernel forms P = 2^(fma(s, scale_log2, -base)) with base = row max * scale_log2 rounded
// to the nearest. At the maximum that exponent is the product's rounding error, at most half an
// ulp of the base; below kExactExponentBase (2^24) that is at most 1, a factor common to the
// whole row that the normalisation cancels (the log-sum-exp takes the same base). Past it the
// error alone can overflow or underflow 2^x: softmax_scale 1e30 on scores near 1 gives a base
// near 1.4e30, whose ulp is 2^77, and the row would be NaN or 0 (rounding the base up instead
// only trades the overflow for the underflow). Such rows take P = 2^((s - max) * scale_log2),
// exactly 1 at the maximum: the kernels check once a tile, and in such rows only subtract the
// maximum from the scores and take base 0 (one extra subtraction a score there, none elsewhere).
// In such rows the Hopper forward rescales O by 2^((old max - new max) * scale_log2), the same
// exact form; the portable forward (between key tiles) and the decode kernel (between warps)
// still rescale by the difference of the two rounded bases, which can be off by up to an ulp
// of the base (2 at 2^24) when a row's maximum grows by only a few ulps: rare, and not yet
// changed (it needs a GPU run to check).
#include <cmath>

namespace tilegrid::attention {

constexpr float kExactExponentBase = 16777216.f;  // 2^24: an ulp of the base is 2 from here

// An intrinsic, so that the compiler does not contract the product into a later addition
// (the log-sum-exp must use this very base).
__device__ __forceinline__ float exp2_base(float row_max, float scale_log2) {
  return __fmul_rn(row_max, scale_log2);
}

// Whether a row with this base needs the exact exponent (false for a row with no visible key,
// base 0, and for a NaN base, which propagates either way).
__device__ __forceinline__ bool needs_exact_exponent(float base) {
  return fabsf(base) >= kExactExponentBase;
}

}  // namespace tilegrid::attention
