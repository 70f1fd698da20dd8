#pragma once
// Shared by the attention GPU tests: one problem run on the GPU (outputs poisoned first) and
// by the CPU reference on the same bf16/fp16 inputs, compared element by element.
// Tolerances: P is rounded to the input type before P V (relative 2^-9 for bf16, 2^-12 for
// fp16) and O once more when stored; LSE is fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"
#include "tilegrid/attention/attention.h"
#ifdef TILEGRID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tilegrid::attention::test {

struct GpuCase {
  int64_t sq, sk, hq, hk;
  bool causal;
  int64_t window_left, window_right;
  double softcap;
};

// expected_kernel: when given, the kernel that last_cuda_kernel() must name after the call.
inline void expect_gpu_matches_reference(DType dtype, int64_t d, const GpuCase& c,
                                         const char* expected_kernel = nullptr) {
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
  if (expected_kernel != nullptr) {
    ASSERT_EQ(std::string(last_cuda_kernel()), expected_kernel) << "head dim " << d;
  }
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

}  // namespace tilegrid::attention::test
