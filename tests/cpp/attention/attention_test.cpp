#include "tilegrid/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "test_util.h"

namespace tilegrid::attention {
namespace {

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Attention, QueriesThatSeeNoKeyGetZeroAndMinusInfinity) {
  // Causal with 6 queries and 2 keys, bottom-right aligned: queries 0..3 see no key.
  Tensor q = testing::random_tensor({1, 6, 1, 64}, DType::Float32);
  Tensor kv = testing::random_tensor({1, 2, 1, 64}, DType::Float32);
  Tensor out = Tensor::empty({1, 6, 1, 64}, DType::Float32, Device::cpu());
  Tensor lse = Tensor::empty({1, 1, 6}, DType::Float32, Device::cpu());
  testing::poison(out);
  testing::poison(lse);
  Params p;
  p.causal = true;
  forward(q, kv, kv, p, out, lse.view());
  const float* o = static_cast<const float*>(out.data());
  const float* l = static_cast<const float*>(lse.data());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isinf(l[i]) && l[i] < 0) << i;
    for (int c = 0; c < 64; ++c) ASSERT_EQ(o[i * 64 + c], 0.f);
  }
  for (int i = 4; i < 6; ++i) EXPECT_TRUE(std::isfinite(l[i])) << i;
}

TEST(Attention, BadInputsGetClearErrors) {
  Tensor q = testing::random_tensor({1, 4, 2, 64}, DType::BFloat16);
  Tensor k3 = testing::random_tensor({1, 4, 3, 64}, DType::BFloat16);
  Tensor out = Tensor::empty({1, 4, 2, 64}, DType::BFloat16, Device::cpu());
  EXPECT_EQ(message_of([&] { forward(q, k3, k3, {}, out, std::nullopt); }),
            "flash_attn_func: heads of q (2) must be a multiple of heads of k and v (3)");
  Params negative;
  negative.softcap = -1;
  EXPECT_THROW(forward(q, q, q, negative, out, std::nullopt), ValueError);
  TensorView on_gpu(q.data(), DType::BFloat16, Device::cuda(0), {1, 4, 2, 64});
  TensorView out_gpu(out.data(), DType::BFloat16, Device::cuda(0), {1, 4, 2, 64});
  EXPECT_NE(message_of([&] {
              forward(on_gpu, on_gpu, on_gpu, {}, out_gpu, std::nullopt);
            }).find("not implemented yet"),
            std::string::npos);
}

}  // namespace
}  // namespace tilegrid::attention
