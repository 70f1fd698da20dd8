#include <gtest/gtest.h>

#include "tilegrid/core/dlpack.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/error.h"

namespace tilegrid {
namespace {

constexpr DType kAll[] = {DType::Bool,    DType::UInt8,    DType::Int32,   DType::Int64,
                          DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

TEST(DType, ItemsizesMatchTheirBitWidths) {
  EXPECT_EQ(itemsize(DType::Bool), 1u);
  EXPECT_EQ(itemsize(DType::BFloat16), 2u);
  EXPECT_EQ(itemsize(DType::Float16), 2u);
  EXPECT_EQ(itemsize(DType::Int32), 4u);
  EXPECT_EQ(itemsize(DType::Int64), 8u);
  EXPECT_EQ(itemsize(DType::Float64), 8u);
}

TEST(DType, NamesFollowPyTorch) {
  EXPECT_EQ(name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(name(DType::Float16), "float16");
  EXPECT_EQ(name(DType::Int64), "int64");
}

TEST(DLPack, EveryDTypeRoundTrips) {
  for (DType d : kAll) EXPECT_EQ(dlpack::dtype_from_dlpack(dlpack::to_dlpack(d)), d) << d;
}

TEST(DLPack, UnsupportedTypesAreTypeErrors) {
  EXPECT_THROW(dlpack::dtype_from_dlpack({dlpack::kDLFloat, 8, 1}), TypeError);
  EXPECT_THROW(dlpack::dtype_from_dlpack({dlpack::kDLFloat, 32, 4}), TypeError);
  EXPECT_THROW(dlpack::device_from_dlpack({7, 0}), ValueError);
}

TEST(DLPack, DevicesRoundTrip) {
  EXPECT_EQ(dlpack::device_from_dlpack(dlpack::to_dlpack(Device::cuda(3))), Device::cuda(3));
  EXPECT_EQ(dlpack::device_from_dlpack(dlpack::to_dlpack(Device::cpu())), Device::cpu());
}

}  // namespace
}  // namespace tilegrid
