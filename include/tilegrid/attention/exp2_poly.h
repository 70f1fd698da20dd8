#pragma once
// 2^x on the FMA units (the FlashAttention-4 idea for Hopper, where the 16 exp/clk/SM of the
// special-function unit rival the tensor cores' rate): a chosen fraction of a row's
// exponentials is computed here so that both pipes work at once.
//
// x = n + f with n = floor(x) and f in [0, 1); 2^f by a degree-3 polynomial in Horner form
// (minimax coefficients; max relative error 1.0e-4 measured over [-126, 0], far under one bf16 ulp
// of 3.9e-3); 2^n by adding n to the exponent bits. x is clamped to >= -126 first: 2^-126 is the
// smallest normal float (adding -127 to the exponent of p underflows to zero, which the unit test
// caught), and after the row maximum is subtracted such terms are under 2^-126 of the largest one,
// negligible in any sum the softmax forms.
#include <cstdint>
#include <cstring>

#include "tilegrid/core/host_device.h"

namespace tilegrid::attention {

TG_HOST_DEVICE float exp2_poly(float x) {
  x = x < -126.f ? -126.f : x;
  // floor() as FlashAttention-4 does it on the FMA pipe: adding 1.5 * 2^23 in round-down
  // mode leaves floor(x) in the low mantissa bits; on the host floorf gives the same value.
#if defined(__CUDA_ARCH__)
  const float shifted = __fadd_rd(x, 12582912.f);  // 1.5 * 2^23
  const float n = shifted - 12582912.f;
#else
  const float n = __builtin_floorf(x);
#endif
  const float f = x - n;
  float p = 0.0771f;  // Horner: 1 + f (0.6951 + f (0.2276 + f 0.0771))
  p = p * f + 0.2276f;
  p = p * f + 0.6951f;
  p = p * f + 1.0f;
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(p) + (uint32_t(int32_t(n)) << 23);
  return __uint_as_float(bits);
#else
  std::memcpy(&bits, &p, 4);
  bits += uint32_t(int32_t(n)) << 23;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
#endif
}

}  // namespace tilegrid::attention
