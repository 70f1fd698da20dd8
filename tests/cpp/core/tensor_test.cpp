#include "tilegrid/core/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda_copy.h"
#include "test_util.h"
#include "tilegrid/core/checks.h"

namespace tilegrid {
namespace {

TEST(TensorView, ContiguityIgnoresUnitExtents) {
  int x = 0;
  EXPECT_TRUE(TensorView(&x, DType::Float32, Device::cpu(), {2, 3}).is_contiguous());
  EXPECT_FALSE(TensorView(&x, DType::Float32, Device::cpu(), {2, 3}, {1, 2}).is_contiguous());
  EXPECT_TRUE(TensorView(&x, DType::Float32, Device::cpu(), {2, 1, 3}, {3, 99, 1}).is_contiguous());
}

// torch.empty(2, 0, 4, 64) has strides [256, 256, 64, 1] and torch.empty(4, 0) [1, 1]: no
// element is out of place, and torch calls both contiguous.
TEST(TensorView, TensorsWithoutElementsAreContiguous) {
  EXPECT_TRUE(TensorView(nullptr, DType::Float32, Device::cpu(), {2, 0, 4, 64}, {256, 256, 64, 1})
                  .is_contiguous());
  EXPECT_TRUE(TensorView(nullptr, DType::Float32, Device::cpu(), {4, 0}, {1, 1}).is_contiguous());
  EXPECT_TRUE(TensorView(nullptr, DType::Float32, Device::cpu(), {0, 3}, {7, 5}).is_contiguous());
}

TEST(TensorView, NegativeDimsCountFromTheEnd) {
  int x = 0;
  TensorView v(&x, DType::Float16, Device::cpu(), {4, 5, 6});
  EXPECT_EQ(v.size(-1), 6);
  EXPECT_EQ(v.stride(-2), 6);
  EXPECT_THROW(v.size(3), ValueError);
}

TEST(Tensor, EmptyAllocatesAlignedHostMemory) {
  Tensor t = Tensor::empty({3, 7}, DType::BFloat16, Device::cpu());
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 256, 0u);
  EXPECT_EQ(t.view().nbytes(), 42u);
  EXPECT_TRUE(t.view().is_contiguous());
}

TEST(Tensor, EmptyRefusesShapesWhoseBytesOrStridesOverflow) {
  const int64_t big = int64_t(1) << 62;
  for (const Shape& shape :
       {Shape{big, 2}, Shape{big + 1}, Shape{0, INT64_MAX}, Shape{0, big, 4}}) {
    try {
      Tensor::empty(shape, DType::Float32, Device::cpu());
      ADD_FAILURE() << "no error for shape " << shape;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("float32 would take more than 2^63 bytes"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(Tensor::empty({0, big / 4}, DType::Float32, Device::cpu()).numel(), 0);
}

TEST(Tensor, DLPackExportSharesMemoryAndOutlivesTheTensor) {
  dlpack::DLManagedTensor* managed = nullptr;
  void* data = nullptr;
  {
    Tensor t = Tensor::empty({2, 4}, DType::Float32, Device::cpu());
    static_cast<float*>(t.data())[5] = 3.5f;
    data = t.data();
    managed = t.to_dlpack();
  }
  ASSERT_EQ(managed->dl_tensor.data, data);
  EXPECT_EQ(managed->dl_tensor.shape[1], 4);
  EXPECT_EQ(managed->dl_tensor.strides[0], 4);
  EXPECT_EQ(static_cast<float*>(managed->dl_tensor.data)[5], 3.5f);  // still alive
  Tensor back = Tensor::from_dlpack(managed);
  EXPECT_EQ(back.data(), data);
  EXPECT_EQ(back.dtype(), DType::Float32);
  EXPECT_EQ(back.shape(), Shape({2, 4}));
}

TEST(Tensor, DLPackImportCallsTheProducersDeleterOnce) {
  static int deleted = 0;
  static float storage[6] = {};
  static int64_t shape[2] = {2, 3};
  static dlpack::DLManagedTensor managed{};
  managed.dl_tensor = {storage, {dlpack::kDLCPU, 0}, 2, {dlpack::kDLFloat, 32, 1}, shape, nullptr,
                       0};
  managed.deleter = [](dlpack::DLManagedTensor*) { ++deleted; };
  {
    Tensor a = Tensor::from_dlpack(&managed);
    Tensor b = a;
    EXPECT_EQ(a.view().strides, Shape({3, 1}));  // null strides mean row-major
  }
  EXPECT_EQ(deleted, 1);
}

TEST(Checks, MessagesSayWhatWasExpectedAndGiven) {
  int x = 0;
  TensorView v(&x, DType::Int64, Device::cpu(), {4});
  try {
    check_dtype("op", "x", v, {DType::Float32, DType::BFloat16});
    FAIL() << "expected a TypeError";
  } catch (const TypeError& e) {
    EXPECT_STREQ(e.what(), "op: x must be float32 or bfloat16, got int64");
  }
  try {
    check_shape("op", "w", v, {5});
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "op: w must have shape [5], got [4]");
  }
}

TEST(Tensor, CudaAllocationIsDeviceMemory) {
  TG_SKIP_WITHOUT_GPU();
#ifdef TILEGRID_WITH_CUDA
  Tensor t = Tensor::empty({1024}, DType::Float32, Device::cuda(0));
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, t.data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
#endif
}

// cuda::copy_small_to_device: every byte of sizes from 0 to its limit lands, in stream
// order, and the host source may change as soon as the call returns.
TEST(CudaCopy, SmallCopiesToTheDeviceLandEveryByte) {
  TG_SKIP_WITHOUT_GPU();
#ifdef TILEGRID_WITH_CUDA
  for (size_t n : {size_t(0), size_t(1), size_t(48), size_t(255), size_t(257),
                   cuda::kSmallCopyBytes}) {
    std::vector<uint8_t> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = uint8_t(i * 7 + 3);
    Tensor dev = Tensor::empty({int64_t(n) + 1}, DType::UInt8, Device::cuda(0));
    ASSERT_EQ(cudaMemset(dev.data(), 0xee, n + 1), cudaSuccess);
    cuda::copy_small_to_device(dev.data(), host.data(), n, 0, Stream{});
    std::fill(host.begin(), host.end(), uint8_t(0));  // the copy took the bytes already
    Tensor back = dev.to(Device::cpu());
    const auto* b = static_cast<const uint8_t*>(back.data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], uint8_t(i * 7 + 3)) << "byte " << i << " of " << n;
    EXPECT_EQ(b[n], 0xee) << "a byte past the copy was written (n = " << n << ")";
  }
  EXPECT_NE(testing::error_message([] {
              cuda::copy_small_to_device(nullptr, nullptr, cuda::kSmallCopyBytes + 1, 0, Stream{});
            }).find("at most"),
            std::string::npos);
#endif
}

}  // namespace
}  // namespace tilegrid
