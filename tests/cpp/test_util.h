#pragma once
// Helpers shared by the C++ tests: GPU detection, host/device copies, random data.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tilegrid/core/error.h"
#include "tilegrid/core/half_convert.h"
#include "tilegrid/core/tensor.h"
#ifdef TILEGRID_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tilegrid::testing {

inline bool cuda_available() {
#ifdef TILEGRID_WITH_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

// The message of the tilegrid::Error (or subclass) that `call` throws, or "no error".
inline std::string error_message(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

#define TG_SKIP_WITHOUT_GPU() \
  if (!::tilegrid::testing::cuda_available()) GTEST_SKIP() << "no CUDA GPU on this machine"

// Copies a tensor to `device` (contiguous source).
inline Tensor to_device(const Tensor& src, Device device) {
  Tensor dst = Tensor::empty(src.shape(), src.dtype(), device);
  const size_t n = src.view().nbytes();
  if (src.device().is_cpu() && device.is_cpu()) {
    std::memcpy(dst.data(), src.data(), n);
    return dst;
  }
#ifdef TILEGRID_WITH_CUDA
  EXPECT_EQ(cudaMemcpy(dst.data(), src.data(), n, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
  return dst;
}

// Fills bytes with a pattern that decodes to NaN in every float type, so that an output
// element a kernel forgot to write fails the comparison.
inline void poison(const Tensor& t) {
  std::vector<unsigned char> bytes(t.view().nbytes(), 0xff);
  if (t.device().is_cpu()) {
    std::memcpy(t.data(), bytes.data(), bytes.size());
    return;
  }
#ifdef TILEGRID_WITH_CUDA
  EXPECT_EQ(cudaMemcpy(t.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
#endif
}

inline std::mt19937& rng() {
  static std::mt19937 gen(std::random_device{}());
  return gen;
}

// A host tensor of `dtype` holding normal(mean, std) samples (rounded to dtype).
inline Tensor random_tensor(const Shape& shape, DType dtype, float mean = 0.f, float std = 1.f) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  std::normal_distribution<float> dist(mean, std);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = dist(rng());
    switch (dtype) {
      case DType::Float32:
        static_cast<float*>(t.data())[i] = v;
        break;
      case DType::Float16:
        static_cast<uint16_t*>(t.data())[i] = float_to_float16(v);
        break;
      case DType::BFloat16:
        static_cast<uint16_t*>(t.data())[i] = float_to_bfloat16(v);
        break;
      default:
        ADD_FAILURE() << "random_tensor: unsupported dtype " << dtype;
    }
  }
  return t;
}

// The elements of a contiguous float tensor (on any device) as doubles.
inline std::vector<double> to_doubles(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : to_device(t, Device::cpu());
  std::vector<double> out(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (host.dtype()) {
      case DType::Float32:
        out[i] = static_cast<const float*>(host.data())[i];
        break;
      case DType::Float16:
        out[i] = float16_to_float(static_cast<const uint16_t*>(host.data())[i]);
        break;
      case DType::BFloat16:
        out[i] = bfloat16_to_float(static_cast<const uint16_t*>(host.data())[i]);
        break;
      default:
        ADD_FAILURE() << "to_doubles: unsupported dtype " << host.dtype();
    }
  }
  return out;
}

}  // namespace tilegrid::testing
