#include "tilegrid/attention/exp2_poly.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tilegrid::attention {
namespace {

// The polynomial's bound: relative error <= 1.1e-4 against exp2 in double precision
// over the whole range the softmax feeds it ([-126, 0], dense sampling) and a little beyond.
TEST(Exp2Poly, RelativeErrorBelowOneBf16Ulp) {
  double worst = 0, at = 0;
  for (double x = -126.0; x <= 2.0; x += 1.0 / 4096) {
    const double want = std::exp2(x);
    const double got = exp2_poly(float(x));
    const double err = std::fabs(got - want) / want;
    if (err > worst) {
      worst = err;
      at = x;
    }
  }
  EXPECT_LT(worst, 1.1e-4) << "worst at x = " << at;
  EXPECT_LT(worst, 1.0 / 256);  // one bf16 ulp (2^-8) with a wide margin
}

TEST(Exp2Poly, ExactAtIntegersAndClampedBelow) {
  for (int n = -126; n <= 10; ++n) EXPECT_EQ(exp2_poly(float(n)), std::ldexp(1.f, n)) << n;
  EXPECT_EQ(exp2_poly(-1000.f), std::ldexp(1.f, -126));
  EXPECT_GT(exp2_poly(-1000.f), 0.f);
}

}  // namespace
}  // namespace tilegrid::attention
