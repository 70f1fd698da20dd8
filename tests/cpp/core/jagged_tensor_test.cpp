#include "tilegrid/core/jagged_tensor.h"

#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace tilegrid {
namespace {

Tensor offsets_tensor(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, DType::Int64, Device::cpu());
  std::copy(values.begin(), values.end(), static_cast<int64_t*>(t.data()));
  return t;
}

TEST(JaggedTensor, BatchIndexSkipsEmptyTensors) {
  Tensor data = Tensor::empty({5, 3}, DType::Float32, Device::cpu());
  JaggedTensor j(data, offsets_tensor({0, 2, 2, 5, 5}));
  EXPECT_EQ(j.num_tensors(), 4);
  Tensor jidx = j.jidx();
  const int32_t* idx = static_cast<const int32_t*>(jidx.data());
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 5), (std::vector<int32_t>{0, 0, 2, 2, 2}));
}

TEST(JaggedTensor, RejectsBadOffsetsWithTheReason) {
  Tensor data = Tensor::empty({4}, DType::Float32, Device::cpu());
  EXPECT_THROW(JaggedTensor(data, offsets_tensor({1, 4})), ValueError);
  EXPECT_THROW(JaggedTensor(data, offsets_tensor({0, 3, 2, 4})), ValueError);
  EXPECT_THROW(JaggedTensor(data, offsets_tensor({0, 3})), ValueError);
  Tensor int32_offsets = Tensor::empty({2}, DType::Int32, Device::cpu());
  EXPECT_THROW(JaggedTensor(data, int32_offsets), TypeError);
  try {
    JaggedTensor(data, offsets_tensor({0, 3, 2, 4}));
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("non-decreasing"), std::string::npos) << e.what();
  }
}

TEST(JaggedTensor, CudaBatchIndexMatchesCpu) {
  TG_SKIP_WITHOUT_GPU();
  std::vector<int64_t> offsets{0};
  std::uniform_int_distribution<int64_t> size(0, 300);
  for (int b = 0; b < 64; ++b) offsets.push_back(offsets.back() + size(testing::rng()));
  Tensor cpu_offsets = offsets_tensor(offsets);
  Tensor data = Tensor::empty({offsets.back()}, DType::Float32, Device::cuda(0));
  JaggedTensor cuda_j(data, testing::to_device(cpu_offsets, Device::cuda(0)));
  Tensor cuda_idx = cuda_j.jidx();
  Tensor expected = Tensor::empty({offsets.back()}, DType::Int32, Device::cpu());
  jagged_batch_index(cpu_offsets, expected);
  Tensor got = testing::to_device(cuda_idx, Device::cpu());
  for (int64_t i = 0; i < offsets.back(); ++i)
    ASSERT_EQ(static_cast<int32_t*>(got.data())[i], static_cast<int32_t*>(expected.data())[i])
        << "row " << i;
}

}  // namespace
}  // namespace tilegrid
