// tg::rope_rotate through the C++ API: the rotation against the formula of rope_rotate.h
// computed here, the inverse undoing it, output into a column block of a wider matrix, and
// (on a GPU) the CUDA kernel against the CPU.
#include "tilegrid/fusion/rope_rotate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace tilegrid {
namespace {

using testing::random_tensor;
using testing::to_doubles;

constexpr int64_t kRows = 37, kHeads = 3, kPairs = 4, kWidth = kHeads * 2 * kPairs;

struct Inputs {
  Tensor x, positions, inv_freq;
};

Inputs inputs() {
  Inputs in{random_tensor({kRows, kWidth}, DType::Float32),
            Tensor::empty({kRows}, DType::Int64, Device::cpu()),
            Tensor::empty({kPairs}, DType::Float32, Device::cpu())};
  for (int64_t i = 0; i < kRows; ++i) static_cast<int64_t*>(in.positions.data())[i] = 3 * i + 1;
  for (int64_t j = 0; j < kPairs; ++j)
    static_cast<float*>(in.inv_freq.data())[j] = std::pow(10000.f, -2.f * float(j) / (2 * kPairs));
  return in;
}

// The header's formula in float64, each pair (c, c + 1) turned by +-positions[i] * inv_freq[j].
std::vector<double> rotated(const Inputs& in, bool inverse) {
  const std::vector<double> x = to_doubles(in.x);
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t j = 0; j < kPairs; ++j) {
        const int64_t c = i * kWidth + h * 2 * kPairs + 2 * j;
        const double t = double(static_cast<const int64_t*>(in.positions.data())[i]) *
                         static_cast<const float*>(in.inv_freq.data())[j] * (inverse ? -1 : 1);
        out[c] = x[c] * std::cos(t) - x[c + 1] * std::sin(t);
        out[c + 1] = x[c] * std::sin(t) + x[c + 1] * std::cos(t);
      }
  return out;
}

TEST(RopeRotate, MatchesTheFormulaIntoAColumnBlockAndTheInverseUndoesIt) {
  const Inputs in = inputs();
  // out is columns [5, 5 + kWidth) of a [kRows, kWidth + 9] matrix: its row stride is wider.
  Tensor wide = Tensor::empty({kRows, kWidth + 9}, DType::Float32, Device::cpu());
  for (int64_t e = 0; e < wide.numel(); ++e) static_cast<float*>(wide.data())[e] = -7.f;
  const TensorView block(static_cast<float*>(wide.data()) + 5, DType::Float32, Device::cpu(),
                         {kRows, kWidth}, {kWidth + 9, 1});
  rope_rotate(in.x.view(), in.positions.view(), in.inv_freq.view(), false, block);
  const std::vector<double> want = rotated(in, false);
  const float* w = static_cast<const float*>(wide.data());
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t c = 0; c < kWidth + 9; ++c) {
      const double got = w[i * (kWidth + 9) + c];
      if (c < 5 || c >= 5 + kWidth)
        EXPECT_EQ(got, -7.0) << "a column outside the block was written: " << c;
      else
        EXPECT_NEAR(got, want[size_t(i * kWidth + c - 5)], 1e-5) << "row " << i << " column " << c;
    }
  // The inverse, in place, turns the block back into x.
  rope_rotate(block, in.positions.view(), in.inv_freq.view(), true, block);
  const std::vector<double> x = to_doubles(in.x);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t c = 0; c < kWidth; ++c)
      EXPECT_NEAR(w[i * (kWidth + 9) + 5 + c], x[size_t(i * kWidth + c)], 1e-5);
}

TEST(RopeRotate, RefusesAnOddHeadDimensionsWidth) {
  const Inputs in = inputs();
  Tensor narrow = random_tensor({kRows, kWidth - 1}, DType::Float32);
  Tensor out = Tensor::empty({kRows, kWidth - 1}, DType::Float32, Device::cpu());
  EXPECT_FALSE(testing::error_message([&] {
                 rope_rotate(narrow.view(), in.positions.view(), in.inv_freq.view(), false,
                             out.view());
               }).empty());
}

TEST(RopeRotate, CudaKernelEqualsTheCpu) {
  TG_SKIP_WITHOUT_GPU();
  const Inputs in = inputs();
  const Device gpu = Device::cuda(0);
  Tensor cpu_out = Tensor::empty({kRows, kWidth}, DType::Float32, Device::cpu());
  rope_rotate(in.x.view(), in.positions.view(), in.inv_freq.view(), false, cpu_out.view());
  const Tensor x = testing::to_device(in.x, gpu), p = testing::to_device(in.positions, gpu);
  const Tensor f = testing::to_device(in.inv_freq, gpu);
  Tensor out = Tensor::empty({kRows, kWidth}, DType::Float32, gpu);
  rope_rotate(x.view(), p.view(), f.view(), false, out.view());
  const std::vector<double> got = to_doubles(out), want = to_doubles(cpu_out);
  for (size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], want[e], 1e-5) << "element " << e;
}

}  // namespace
}  // namespace tilegrid
