#include "tilegrid/fusion/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "test_util.h"

namespace tilegrid {
namespace {

using testing::random_tensor;
using testing::to_doubles;

constexpr int64_t kIgnore = -100;

// Float64 loss and gradient rows, written from the formulas independently of the library's
// CPU path: loss = logsumexp - logit[target], grad = (softmax - onehot) * scale, ignored rows 0.
void reference(const std::vector<double>& x, const std::vector<int64_t>& target, int64_t vocab,
               double scale, std::vector<double>& loss, std::vector<double>& grad) {
  const int64_t rows = int64_t(target.size());
  loss.assign(rows, 0.0);
  grad.assign(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] == kIgnore) continue;
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < vocab; ++c) max = std::max(max, x[r * vocab + c]);
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(x[r * vocab + c] - max);
    const double lse = max + std::log(sum);
    loss[r] = lse - x[r * vocab + target[r]];
    for (int64_t c = 0; c < vocab; ++c)
      grad[r * vocab + c] = (std::exp(x[r * vocab + c] - lse) - (c == target[r])) * scale;
  }
}

using Case = std::tuple<DType, int64_t /*vocab*/, bool /*cuda*/>;

class CrossEntropyMatchesFloat64Reference : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyMatchesFloat64Reference, LossAndGradient) {
  const auto [dtype, vocab, on_cuda] = GetParam();
  if (on_cuda) TG_SKIP_WITHOUT_GPU();
  const Device device = on_cuda ? Device::cuda(0) : Device::cpu();
  const int64_t rows = 13;
  const double scale = 0.125;
  Tensor logits = random_tensor({rows, vocab}, dtype, 0.f, 3.f);
  Tensor target = Tensor::empty({rows}, DType::Int64, Device::cpu());
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = r % 4 == 1 ? kIgnore : (r * 7919) % vocab;
  std::copy(t.begin(), t.end(), static_cast<int64_t*>(target.data()));
  Tensor grad_scale = Tensor::empty({1}, DType::Float32, Device::cpu());
  *static_cast<float*>(grad_scale.data()) = float(scale);

  std::vector<double> want_loss, want_grad;
  reference(to_doubles(logits), t, vocab, scale, want_loss, want_grad);

  Tensor ld = testing::to_device(logits, device), td = testing::to_device(target, device),
         sd = testing::to_device(grad_scale, device);
  Tensor loss = Tensor::empty({rows}, DType::Float32, device);
  testing::poison(loss);
  cross_entropy_loss_and_grad(ld, td, kIgnore, loss, sd.view());

  const std::vector<double> got_loss = to_doubles(loss), got_grad = to_doubles(ld);
  const double rtol = dtype == DType::BFloat16 ? 1e-2 : dtype == DType::Float16 ? 2e-3 : 2e-6;
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_NEAR(got_loss[r], want_loss[r], 1e-4 * std::sqrt(double(vocab)) + 1e-5) << "row " << r;
  for (size_t i = 0; i < got_grad.size(); ++i) {
    ASSERT_NEAR(got_grad[i], want_grad[i], rtol * (std::abs(want_grad[i]) + 0.25 * scale))
        << "element " << i << " (row " << i / vocab << ")";
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [dtype, vocab, on_cuda] = info.param;
  return std::string(name(dtype)) + "_v" + std::to_string(vocab) + (on_cuda ? "_cuda" : "_cpu");
}

// Vocabularies that reach the CUDA kernel's paths: one element a row, widths that allow no
// 16-byte vectors (37), rows shorter than a block's unrolled loads (64), and long rows (50000).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyMatchesFloat64Reference,
    ::testing::Combine(::testing::Values(DType::Float32, DType::Float16, DType::BFloat16),
                       ::testing::Values(1, 37, 64, 50000), ::testing::Values(false, true)),
    case_name);

TEST(CrossEntropy, BadArgumentsGetClearErrors) {
  Tensor logits = random_tensor({4, 8}, DType::BFloat16);
  Tensor target = Tensor::empty({4}, DType::Int64, Device::cpu());
  Tensor loss = Tensor::empty({4}, DType::Float32, Device::cpu());
  Tensor loss3 = Tensor::empty({3}, DType::Float32, Device::cpu());
  Tensor target32 = Tensor::empty({4}, DType::Int32, Device::cpu());
  Tensor scale2 = Tensor::empty({2}, DType::Float32, Device::cpu());
  EXPECT_EQ(testing::error_message(
                [&] { cross_entropy_loss_and_grad(logits, target, kIgnore, loss3, std::nullopt); }),
            "cross_entropy_loss_and_grad: loss must have shape [4], got [3]");
  EXPECT_EQ(testing::error_message([&] {
              cross_entropy_loss_and_grad(logits, target32, kIgnore, loss, std::nullopt);
            }),
            "cross_entropy_loss_and_grad: target must be int64, got int32");
  EXPECT_EQ(testing::error_message(
                [&] { cross_entropy_loss_and_grad(logits, target, kIgnore, loss, scale2.view()); }),
            "cross_entropy_loss_and_grad: grad_scale must hold one element, got shape [2]");
}

}  // namespace
}  // namespace tilegrid
