// The Hopper attention kernel, forced through the kernel choice, against the CPU reference.
// Skipped without a GPU of compute capability 9.0 (the only one sm_90a code runs on).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attention/attention_gpu_check.h"
#include "test_util.h"
#include "tilegrid/attention/attention.h"
#include "tilegrid/core/kernel_choice.h"
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

// Restores the previous request and the default switches however the test ends.
struct ForceSm90 {
  explicit ForceSm90(int switches) : previous(requested_kernel(KernelFamily::Attention)) {
    set_kernel_choice(KernelFamily::Attention, KernelPath::Hopper);
    set_sm90_switches(switches);
  }
  ~ForceSm90() {
    set_kernel_choice(KernelFamily::Attention, previous);
    set_sm90_switches(-1);
  }
  KernelPath previous;
};

using Case = test::GpuCase;

void expect_sm90_matches_reference(DType dtype, int64_t d, const Case& c) {
  test::expect_gpu_matches_reference(dtype, d, c, "sm90");
}

const Case kCases[] = {
    {77, 30, 2, 2, true, -1, -1, 0},     // causal, sq > sk: the first 47 rows see no key
    {130, 200, 4, 2, false, 33, 5, 0},   // window with GQA, tails in both tiles
    {65, 65, 2, 1, false, -1, -1, 7.5},  // softcap, MQA
    {300, 517, 2, 2, true, -1, -1, 0},   // several key tiles through the pipeline ring
    {256, 300, 2, 2, false, -1, -1, 0},  // two query tiles, no mask: bit 7's clusters apply
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
  // Every variant: bits 0-1 the FA4 switches, bit 2 ping-pong, bit 3 three consumer
  // warpgroups (head dim 64), bit 4 wider key tiles (head dims 128, 256); bits 3-4 exist without
  // bits 0-1 only, and other head dims run as without them. Bit 5: persistent CTAs (every
  // variant; here with rescaling and with the head-dim-64 default); these small cases give
  // each CTA one tile: test_flash_attn_sm90.py has the ones with more tiles than SMs. Bit 7:
  // clusters of two sharing K/V loads, in the last case (an even number of query tiles, no
  // mask; the others run without it); test_flash_attn_sm90.py has more. Bit 9: the output
  // from registers where the default stores it by TMA (two consumer warpgroups, d = 64 / 128).
  // Bit 6, with bit 5: dynamic tiles from a per-call counter.
  for (int switches :
       {0,  1,  2,  3,  4,   5,   6,   7,   8,   12,  16, 20,
        32, 33, 36, 44, 96, 100, 128, 132, 144, 148, 512, 544}) {
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
