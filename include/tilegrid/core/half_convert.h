#pragma once
// Host-side conversions between float and the 16-bit float formats, for the CPU reference
// paths (device code uses cuda_fp16.h / cuda_bf16.h instead). Rounding is to nearest even,
// as the GPU's conversion instructions do, so CPU and GPU agree bit for bit.
#include <cstdint>
#include <cstring>

namespace tilegrid {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bfloat16_to_float(uint16_t h) {
  return bits_to_float(uint32_t(h) << 16);
}

inline uint16_t float_to_bfloat16(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float float16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24.
    float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_float16(float f) {
  uint32_t bits = float_to_bits(f);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {                                  // subnormal or zero
    // Adding 0.5 (2^-1) aligns the fp16 subnormal grid (step 2^-24) to float's last bits,
    // so the float addition performs the round-to-nearest-even for us.
    float shifted = bits_to_float(abs) + 0.5f;
    return uint16_t(sign | (float_to_bits(shifted) - 0x3f000000u));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u) - (112u << 23);
  return uint16_t(sign | (rounded >> 13));
}

}  // namespace tilegrid
