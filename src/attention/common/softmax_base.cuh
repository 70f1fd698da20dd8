#pragma once
// The exponent base of a softmax row in log2 units (internal, device code): the row maximum
// times scale * log2(e), rounded up. Every kernel forms P = 2^(fma(s, scale_log2, -base)); with
// the base rounded up the exponent is <= 0 for every score s <= max (scale_log2 > 0 on the
// CUDA paths), so no P exceeds 1 whatever the scores' size. Rounded to the nearest instead,
// the maximum's own exponent is the product's rounding error, up to half an ulp of it: past
// 2^31 (softmax_scale 1e30 on scores near 1) that alone overflows 2^x to inf and makes the row
// NaN. One FMUL (the rounding mode is a modifier); it costs the Hopper forward's key-tile loop
// about 2 instructions of 1,760-2,350, and no registers. The log-sum-exp, the rescale of earlier
// tiles and the split-KV merge take the same base, so that their bases agree exactly.
namespace tilegrid::attention {

__device__ __forceinline__ float exp2_base(float row_max, float scale_log2) {
  return __fmul_ru(row_max, scale_log2);
}

}  // namespace tilegrid::attention
