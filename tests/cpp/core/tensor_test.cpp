#include "tilegrid/core/tensor.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tilegrid
