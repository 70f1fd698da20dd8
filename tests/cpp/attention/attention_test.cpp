#include "tilegrid/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

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
