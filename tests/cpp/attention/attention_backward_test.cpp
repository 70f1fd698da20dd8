// The CPU attention backward against central differences of the forward, and its argument
// checks. (The Python tests compare it with float64 autograd over every mask and layout.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"
#include "tilegrid/attention/attention.h"

namespace tilegrid::attention {
namespace {

// L = sum(out * g_out) + sum(lse * g_lse) of a float32 forward.
double loss(const Tensor& q, const Tensor& k, const Tensor& v, const Params& params,
            const std::vector<float>& g_out, const std::vector<float>& g_lse) {
  Tensor out = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor lse =
      Tensor::empty({q.shape()[0], q.shape()[2], q.shape()[1]}, DType::Float32, Device::cpu());
  forward(q, k, v, params, out, lse.view());
  const float* o = static_cast<const float*>(out.data());
  const float* l = static_cast<const float*>(lse.data());
  double sum = 0;
  for (size_t i = 0; i < g_out.size(); ++i) sum += double(o[i]) * g_out[i];
  for (size_t i = 0; i < g_lse.size(); ++i)
    if (std::isfinite(l[i])) sum += double(l[i]) * g_lse[i];
  return sum;
}

std::vector<float> random_values(int64_t n) {
  Tensor t = testing::random_tensor({n}, DType::Float32);
  const float* p = static_cast<const float*>(t.data());
  return {p, p + n};
}

TEST(AttentionBackward, MatchesCentralDifferencesOfTheForward) {
  // Causal with sq > sk (the first row sees no key), MQA and a softcap.
  Tensor q = testing::random_tensor({1, 5, 2, 64}, DType::Float32);
  Tensor k = testing::random_tensor({1, 4, 1, 64}, DType::Float32);
  Tensor v = testing::random_tensor({1, 4, 1, 64}, DType::Float32);
  Params params;
  params.causal = true;
  params.softcap = 3.0;
  const std::vector<float> g_out = random_values(5 * 2 * 64), g_lse = random_values(2 * 5);

  Tensor out = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor lse = Tensor::empty({1, 2, 5}, DType::Float32, Device::cpu());
  forward(q, k, v, params, out, lse.view());
  Tensor dout = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor dlse = Tensor::empty(lse.shape(), DType::Float32, Device::cpu());
  std::copy(g_out.begin(), g_out.end(), static_cast<float*>(dout.data()));
  std::copy(g_lse.begin(), g_lse.end(), static_cast<float*>(dlse.data()));
  Tensor dq = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor dk = Tensor::empty(k.shape(), DType::Float32, Device::cpu());
  Tensor dv = Tensor::empty(v.shape(), DType::Float32, Device::cpu());
  for (const Tensor* t : {&dq, &dk, &dv}) testing::poison(*t);
  backward(dout, q, k, v, out, lse, dlse.view(), params, dq, dk, dv);

  // Central differences, h = 1e-2: truncation O(h^2) ~ 1e-4, float32 rounding of the loss
  // (~1e-6) / 2h ~ 1e-4; the gradients are O(1).
  constexpr float h = 1e-2f;
  for (auto [input, grad, name] :
       {std::tuple{&q, &dq, "dq"}, std::tuple{&k, &dk, "dk"}, std::tuple{&v, &dv, "dv"}}) {
    float* x = static_cast<float*>(input->data());
    const float* g = static_cast<const float*>(grad->data());
    const int64_t n = input->numel();
    for (int64_t i = 0; i < n; i += 7) {
      const float saved = x[i];
      x[i] = saved + h;
      const double up = loss(q, k, v, params, g_out, g_lse);
      x[i] = saved - h;
      const double down = loss(q, k, v, params, g_out, g_lse);
      x[i] = saved;
      EXPECT_NEAR(g[i], (up - down) / (2 * h), 3e-3) << name << "[" << i << "]";
    }
  }
  // Query 0 sees no key: its gradient is exactly zero.
  const float* g = static_cast<const float*>(dq.data());
  for (int c = 0; c < 2 * 64; ++c) ASSERT_EQ(g[c], 0.f) << c;
}

TEST(AttentionBackward, BadInputsGetClearErrors) {
  Tensor q = testing::random_tensor({1, 4, 2, 64}, DType::Float32);
  Tensor out = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor lse = Tensor::empty({1, 2, 4}, DType::Float32, Device::cpu());
  Tensor dq = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor short_dout = Tensor::empty({1, 3, 2, 64}, DType::Float32, Device::cpu());
  EXPECT_EQ(testing::error_message(
                [&] { backward(short_dout, q, q, q, out, lse, std::nullopt, {}, dq, dq, dq); }),
            "flash_attn_func backward: dout must have shape [1, 4, 2, 64], got [1, 3, 2, 64]");
  Tensor wrong_lse = Tensor::empty({1, 4, 2}, DType::Float32, Device::cpu());
  EXPECT_NE(testing::error_message([&] {
              backward(out, q, q, q, out, wrong_lse, std::nullopt, {}, dq, dq, dq);
            }).find("lse must have shape [1, 2, 4]"),
            std::string::npos);
  Tensor dq16 = Tensor::empty(q.shape(), DType::BFloat16, Device::cpu());
  EXPECT_THROW(backward(out, q, q, q, out, lse, std::nullopt, {}, dq16, dq, dq), TypeError);
}

}  // namespace
}  // namespace tilegrid::attention
