#pragma once
// The exponent base of a softmax row in log2 units (internal, device code), and the exact
// exponent for rows whose base is too large for it.
//
// Every kernel forms P = 2^(fma(s, scale_log2, -base)) with base = row max * scale_log2 rounded
// to the nearest. At the maximum that exponent is the product's rounding error, at most half an
// ulp of the base, a factor common to the whole row that the normalisation cancels (the
// log-sum-exp takes the same base). Two things bound the base all the same:
// - the Hopper forward rescales O between key tiles by 2^((old max - new max) * scale_log2),
//   as FlashAttention-3 does, while P was formed against the two rounded bases: the partial
//   sums are then off from each other by up to an ulp of the base, 2^-8 in log2 units (0.27%)
//   below kExactExponentBase (2^16) but up to 1 (a factor 2) near 2^24;
// - past 2^24 the rounding error alone can overflow or underflow 2^x: softmax_scale 1e30 on
//   scores near 1 gives a base near 1.4e30, whose ulp is 2^77, and the row would be NaN or 0.
// Rows whose base is 2^16 or more (logits of 45,000 and more: none a trained model produces,
// but softmax_scale 1e4 on scores of 5 does) therefore take P = 2^((s - max) * scale_log2),
// exactly 1 at the maximum, which the Hopper forward's rescale matches exactly: the kernels
// check once a tile, and in such rows only subtract the maximum from the scores and take base
// 0 (one extra subtraction a score there, none elsewhere). The portable forward (between key
// tiles) and the decode kernel (between warps) move partial sums from one base to another
// with rebase_factor, which takes each side's base as that side formed it (rounded or exact).
// The backward recomputes P from the stored log-sum-exp, whose own rounding is the error of P
// there; past 2^18 it gives NaN gradients instead (flash_bwd_score.cuh, kBackwardLseLimit).
#include <cmath>

namespace tilegrid::attention {

constexpr float kExactExponentBase = 65536.f;  // 2^16: an ulp of the base is 2^-7 from here

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

// The factor 2^(from_base - to_base) that moves probabilities formed against the base of a row
// maximum `from_max` onto the base of `to_max` (>= from_max): a base is exp2_base(max) in a
// normal row and the exact product max * scale_log2 (never formed) in an exact one. Between
// two exact bases that is (from_max - to_max) * scale_log2, the difference of the maxima
// being exact when they are within a factor 2 of each other; across the threshold one fma
// forms the difference with the rounded side as it was rounded. 0 from -inf (nothing summed
// yet); a NaN maximum propagates.
__device__ __forceinline__ float rebase_factor(float from_max, float to_max, float scale_log2) {
  if (from_max == -INFINITY) return 0.f;  // also when to_max is -inf: -inf - -inf is NaN
  const float from_base = exp2_base(from_max, scale_log2);
  const float to_base = exp2_base(to_max, scale_log2);
  const bool from_exact = needs_exact_exponent(from_base);
  const bool to_exact = needs_exact_exponent(to_base);
  if (from_exact && to_exact) return exp2f((from_max - to_max) * scale_log2);
  if (to_exact) return exp2f(fmaf(-to_max, scale_log2, from_base));
  if (from_exact) return exp2f(fmaf(from_max, scale_log2, -to_base));
  return exp2f(from_base - to_base);
}

}  // namespace tilegrid::attention
