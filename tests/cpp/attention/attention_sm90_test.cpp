// The Hopper attention kernel, forced through set_cuda_kernel, against the CPU reference.
// Skipped without a GPU of compute capability 9.0 (the only one sm_90a code runs on).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "test_util.h"
#include "tilegrid/attention/attention.h"
#ifdef TILEGRID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tilegrid::attention {
namespace {

bool hopper_available() {
#ifdef TILEGRID_WITH_CUDA
  if (!testing::cuda_available()) return false;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

// Restores the automatic choice however the test ends.
struct ForceSm90 {
  explicit ForceSm90(int switches) { set_cuda_kernel(CudaKernel::Sm90, switches); }
  ~ForceSm90() { set_cuda_kernel(CudaKernel::Auto); }
};

struct Case {
  int64_t sq, sk, hq, hk;
  bool causal;
  int64_t window_left, window_right;
  double softcap;
};

// Same tolerances as the portable kernel's test: P is rounded to the input type before P V,
// O once more when stored; LSE in fp32.
void expect_sm90_matches_reference(DType dtype, int64_t d, const Case& c) {
  Tensor q = testing::random_tensor({2, c.sq, c.hq, d}, dtype);
  Tensor k = testing::random_tensor({2, c.sk, c.hk, d}, dtype);
  Tensor v = testing::random_tensor({2, c.sk, c.hk, d}, dtype);
  Params p;
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  Tensor ref_out = Tensor::empty(q.shape(), dtype, Device::cpu());
  Tensor ref_lse = Tensor::empty({2, c.hq, c.sq}, DType::Float32, Device::cpu());
  forward(q, k, v, p, ref_out, ref_lse.view());

  const Device gpu = Device::cuda(0);
  Tensor out = Tensor::empty(q.shape(), dtype, gpu);
  Tensor lse = Tensor::empty({2, c.hq, c.sq}, DType::Float32, gpu);
  testing::poison(out);
  testing::poison(lse);
  forward(testing::to_device(q, gpu), testing::to_device(k, gpu), testing::to_device(v, gpu), p,
          out, lse.view());
  ASSERT_EQ(std::string(last_cuda_kernel()), "sm90") << "head dim " << d;
#ifdef TILEGRID_WITH_CUDA
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
  const double atol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  const std::vector<double> o = testing::to_doubles(out), ro = testing::to_doubles(ref_out);
  for (size_t i = 0; i < o.size(); ++i)
    ASSERT_NEAR(o[i], ro[i], atol) << "out element " << i << ", head dim " << d;
  const std::vector<double> l = testing::to_doubles(lse), rl = testing::to_doubles(ref_lse);
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isinf(rl[i])) {
      ASSERT_TRUE(std::isinf(l[i]) && l[i] < 0) << "lse element " << i << " = " << l[i];
    } else {
      ASSERT_NEAR(l[i], rl[i], 2e-4) << "lse element " << i << ", head dim " << d;
    }
  }
}

const Case kCases[] = {
    {77, 30, 2, 2, true, -1, -1, 0},     // causal, sq > sk: the first 47 rows see no key
    {130, 200, 4, 2, false, 33, 5, 0},   // window with GQA, tails in both tiles
    {65, 65, 2, 1, false, -1, -1, 7.5},  // softcap, MQA
    {300, 517, 2, 2, true, -1, -1, 0},   // several key tiles through the pipeline ring
};

TEST(AttentionSm90, MatchesReferenceWithDefaultSwitches) {
  if (!hopper_available()) GTEST_SKIP() << "no GPU of compute capability 9.0";
  ForceSm90 force(-1);
  for (DType dtype : {DType::BFloat16, DType::Float16})
    for (int64_t d : {64, 128, 256})
      for (const Case& c : kCases) expect_sm90_matches_reference(dtype, d, c);
}

TEST(AttentionSm90, MatchesReferenceWithEverySwitchCombination) {
  if (!hopper_available()) GTEST_SKIP() << "no GPU of compute capability 9.0";
  for (int switches = 0; switches < 4; ++switches) {
    ForceSm90 force(switches);
    for (int64_t d : {64, 128, 256})
      for (const Case& c : kCases) expect_sm90_matches_reference(DType::BFloat16, d, c);
  }
}

TEST(AttentionSm90, UnsupportedHeadDimFallsBackToThePortableKernel) {
  if (!hopper_available()) GTEST_SKIP() << "no GPU of compute capability 9.0";
  ForceSm90 force(-1);
  const Case c{100, 100, 2, 2, false, -1, -1, 0};
  Tensor q = testing::random_tensor({2, c.sq, c.hq, 96}, DType::BFloat16);
  const Device gpu = Device::cuda(0);
  Tensor qg = testing::to_device(q, gpu);
  Tensor out = Tensor::empty(q.shape(), DType::BFloat16, gpu);
  forward(qg, qg, qg, {}, out, std::nullopt);
  EXPECT_EQ(std::string(last_cuda_kernel()), "portable");
}

}  // namespace
}  // namespace tilegrid::attention
