#include "tilegrid/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention_gpu_check.h"
#include "test_util.h"

namespace tilegrid::attention {
namespace {

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
  EXPECT_EQ(testing::error_message([&] { forward(q, k3, k3, {}, out, std::nullopt); }),
            "flash_attn_func: heads of q (2) must be a multiple of heads of k and v (3)");
  Params negative;
  negative.softcap = -1;
  EXPECT_THROW(forward(q, q, q, negative, out, std::nullopt), ValueError);
  // CUDA-only requirements are checked before any kernel runs (the views below point at host
  // memory and are never read).
  TensorView f32_gpu(out.data(), DType::Float32, Device::cuda(0), {1, 2, 2, 64});
  EXPECT_NE(testing::error_message([&] {
              forward(f32_gpu, f32_gpu, f32_gpu, {}, f32_gpu, std::nullopt);
            }).find("must be float16 or bfloat16"),
            std::string::npos);
  TensorView odd_stride(q.data(), DType::BFloat16, Device::cuda(0), {1, 2, 2, 64},
                        {260, 130, 65, 1});
  TensorView out_gpu(out.data(), DType::BFloat16, Device::cuda(0), {1, 2, 2, 64});
  EXPECT_NE(testing::error_message([&] {
              forward(odd_stride, odd_stride, odd_stride, {}, out_gpu, std::nullopt);
            }).find("multiples of 8 elements"),
            std::string::npos);
}

// out and lse of a float32 CPU forward.
std::pair<std::vector<double>, std::vector<double>> run_forward(const Tensor& q, const Tensor& k,
                                                                const Tensor& v,
                                                                const Params& params) {
  Tensor out = Tensor::empty(q.shape(), DType::Float32, Device::cpu());
  Tensor lse =
      Tensor::empty({q.shape()[0], q.shape()[2], q.shape()[1]}, DType::Float32, Device::cpu());
  testing::poison(out);
  testing::poison(lse);
  forward(q, k, v, params, out, lse.view());
  return {testing::to_doubles(out), testing::to_doubles(lse)};
}

TEST(Attention, HeadDimsOfQKAndVMustAgreeAndTheErrorNamesBoth) {
  Tensor q = testing::random_tensor({1, 4, 2, 64}, DType::Float32);
  Tensor k128 = testing::random_tensor({1, 4, 2, 128}, DType::Float32);
  Tensor out = Tensor::empty({1, 4, 2, 64}, DType::Float32, Device::cpu());
  EXPECT_EQ(testing::error_message([&] { forward(q, k128, k128, {}, out, std::nullopt); }),
            "flash_attn_func: q and k must have the same head dimension, got q's 64 (q shape "
            "[1, 4, 2, 64]) and k's 128 (k shape [1, 4, 2, 128])");
  Tensor q80 = testing::random_tensor({1, 4, 2, 80}, DType::Float32);
  EXPECT_NE(testing::error_message([&] {
              forward(q80, q, q, {}, out, std::nullopt);
            }).find("got q's 80 (q shape [1, 4, 2, 80]) and k's 64"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              forward(q, q, k128, {}, out, std::nullopt);
            }).find("v's head dimension must equal q's and k's (64"),
            std::string::npos);
}

// FlashAttention's -1: a window of seqlen_q + seqlen_k keys or more is no window, and the
// mask's arithmetic (diagonal -/+ window) must not overflow on the way.
TEST(Attention, WindowsPastEverySequenceEqualTheUnboundedResult) {
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  Tensor q = testing::random_tensor({2, 7, 2, 64}, DType::Float32);
  Tensor k = testing::random_tensor({2, 11, 1, 64}, DType::Float32);
  Tensor v = testing::random_tensor({2, 11, 1, 64}, DType::Float32);
  const int64_t cases[][4] = {{kHuge, -1, -1, -1}, {-1, kHuge, -1, -1}, {kHuge, kHuge, -1, -1},
                              {kHuge, 2, -1, 2},   {3, kHuge, 3, -1},   {18, 18, -1, -1},
                              {17, -1, 17, -1}};
  for (const auto& c : cases) {
    Params huge, unbounded;
    huge.window_left = c[0];
    huge.window_right = c[1];
    unbounded.window_left = c[2];
    unbounded.window_right = c[3];
    const auto got = run_forward(q, k, v, huge);
    const auto want = run_forward(q, k, v, unbounded);
    EXPECT_EQ(got.first, want.first) << c[0] << ", " << c[1];
    EXPECT_EQ(got.second, want.second) << c[0] << ", " << c[1];
    for (double l : got.second) EXPECT_TRUE(std::isfinite(l)) << c[0] << ", " << c[1];
  }
}

TEST(Attention, AnUnsetScaleIsOneOverSqrtHeadDimAndZeroWeighsKeysAlike) {
  Tensor q = testing::random_tensor({1, 5, 1, 96}, DType::Float32);
  Tensor kv = testing::random_tensor({1, 6, 1, 96}, DType::Float32);
  Params explicit_scale, zero;
  explicit_scale.softmax_scale = 1.0 / std::sqrt(96.0);
  zero.softmax_scale = 0.0;
  EXPECT_EQ(run_forward(q, kv, kv, {}).first, run_forward(q, kv, kv, explicit_scale).first);
  const auto uniform = run_forward(q, kv, kv, zero);
  const std::vector<double> values = testing::to_doubles(kv);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(uniform.second[size_t(i)], std::log(6.0), 1e-6);
    for (int64_t c = 0; c < 96; ++c) {
      double mean = 0;
      for (int64_t j = 0; j < 6; ++j) mean += values[size_t(j * 96 + c)] / 6;
      EXPECT_NEAR(uniform.first[size_t(i * 96 + c)], mean, 1e-6);
    }
  }
}

TEST(Attention, ScalesOutsideFloat32AreRefusedAndCudaNeedsAPositiveOne) {
  Tensor q = testing::random_tensor({1, 4, 2, 64}, DType::BFloat16);
  Tensor out = Tensor::empty({1, 4, 2, 64}, DType::BFloat16, Device::cpu());
  for (double bad : {1e300, -1e39, double(NAN), double(INFINITY)}) {
    Params p;
    p.softmax_scale = bad;
    EXPECT_NE(testing::error_message([&] {
                forward(q, q, q, p, out, std::nullopt);
              }).find("softmax_scale must be finite in float32"),
              std::string::npos)
        << bad;
  }
  // The views below point at host memory and are never read: the check comes first.
  TensorView gpu(q.data(), DType::BFloat16, Device::cuda(0), {1, 4, 2, 64});
  TensorView out_gpu(out.data(), DType::BFloat16, Device::cuda(0), {1, 4, 2, 64});
  for (double scale : {-0.5, 0.0}) {
    Params p;
    p.softmax_scale = scale;
    EXPECT_NE(testing::error_message([&] {
                forward(gpu, gpu, gpu, p, out_gpu, std::nullopt);
              }).find("on CUDA without softcap, softmax_scale must be > 0"),
              std::string::npos)
        << scale;
  }
}

// As torch's scaled_dot_product_attention (math backend): a NaN score makes the row NaN.
TEST(Attention, ANanInARowOfQMakesThatRowNanAndNoOther) {
  Tensor q = testing::random_tensor({1, 3, 1, 64}, DType::Float32);
  Tensor kv = testing::random_tensor({1, 4, 1, 64}, DType::Float32);
  static_cast<float*>(q.data())[64 + 5] = NAN;  // query 1
  const auto [out, lse] = run_forward(q, kv, kv, {});
  EXPECT_TRUE(std::isnan(lse[1]));
  EXPECT_TRUE(std::isfinite(lse[0]) && std::isfinite(lse[2]));
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_TRUE(std::isnan(out[size_t(64 + c)])) << c;
    EXPECT_TRUE(std::isfinite(out[size_t(c)]) && std::isfinite(out[size_t(128 + c)])) << c;
  }
}

TEST(Attention, EmptyBatchesGiveEmptyOutputsAndGradients) {
  Tensor q = Tensor::empty({2, 0, 4, 64}, DType::Float32, Device::cpu());
  Tensor out = Tensor::empty({2, 0, 4, 64}, DType::Float32, Device::cpu());
  Tensor lse = Tensor::empty({2, 4, 0}, DType::Float32, Device::cpu());
  forward(q, q, q, {}, out, lse.view());
  Tensor dq = Tensor::empty({2, 0, 4, 64}, DType::Float32, Device::cpu());
  Tensor dk = Tensor::empty({2, 0, 4, 64}, DType::Float32, Device::cpu());
  Tensor dv = Tensor::empty({2, 0, 4, 64}, DType::Float32, Device::cpu());
  backward(out, q, q, q, out, lse, std::nullopt, {}, dq, dk, dv);
}

// The CUDA kernel against the CPU reference: causal with seqlen_q > seqlen_k (fully masked
// rows), a sliding window with GQA, and softcap, at every head dimension.
using test::GpuCase;
using test::expect_gpu_matches_reference;

TEST(AttentionGpu, MatchesReferenceAtEveryHeadDim) {
  TG_SKIP_WITHOUT_GPU();
  const GpuCase cases[] = {
      {77, 30, 2, 2, true, -1, -1, 0},     // causal, sq > sk: the first 47 rows see no key
      {130, 200, 4, 2, false, 33, 5, 0},   // window with GQA, tails in both tiles
      {65, 65, 2, 1, false, -1, -1, 7.5},  // softcap, MQA
  };
  for (DType dtype : {DType::BFloat16, DType::Float16})
    for (int64_t d : {64, 96, 128, 192, 256})
      for (const GpuCase& c : cases) expect_gpu_matches_reference(dtype, d, c);
}

}  // namespace
}  // namespace tilegrid::attention
