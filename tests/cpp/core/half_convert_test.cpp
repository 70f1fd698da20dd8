#include "tilegrid/core/half_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tilegrid {
namespace {

TEST(HalfConvert, ExactValuesRoundTrip) {
  for (float v :
       {0.f, 1.f, -2.5f, 0.099609375f, 65504.f, 6.103515625e-05f, 5.9604644775390625e-08f}) {
    EXPECT_EQ(float16_to_float(float_to_float16(v)), v) << v;
  }
  for (float v : {0.f, 1.f, -2.5f, 3.0e38f, 1.0e-38f}) {
    float b = bfloat16_to_float(float_to_bfloat16(v));
    EXPECT_NEAR(b, v, std::fabs(v) / 128) << v;
  }
}

TEST(HalfConvert, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between two float16 values: ties go to the even one (1.0).
  EXPECT_EQ(float16_to_float(float_to_float16(1.f + 0x1p-11f)), 1.f);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
  EXPECT_EQ(float16_to_float(float_to_float16(1.f + 3 * 0x1p-11f)), 1.f + 0x1p-9f);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.f + 0x1p-8f)), 1.f);
  // Subnormal halfway case: 1.5 * 2^-24 rounds to 2 * 2^-24.
  EXPECT_EQ(float16_to_float(float_to_float16(1.5f * 0x1p-24f)), 0x1p-23f);
}

TEST(HalfConvert, OverflowAndNaN) {
  EXPECT_TRUE(std::isinf(float16_to_float(float_to_float16(70000.f))));
  EXPECT_TRUE(
      std::isnan(float16_to_float(float_to_float16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(
      std::isnan(bfloat16_to_float(float_to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace tilegrid
