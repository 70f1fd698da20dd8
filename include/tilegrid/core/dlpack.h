#pragma once
// The DLPack ABI (the unversioned DLManagedTensor that every framework exchanges through a
// "dltensor" capsule), declared here so that the core library needs no extra package; the
// field order and enum values are those of the DLPack specification, which is a binary
// interface. Conversions between DLPack and tilegrid's DType/Device live here too.
#include <cstdint>

#include "tilegrid/core/device.h"
#include "tilegrid/core/dtype.h"

namespace tilegrid::dlpack {

enum DLDeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum DLDataTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means row-major contiguous
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

DLDataType to_dlpack(DType dtype);
DType dtype_from_dlpack(DLDataType dtype);  // throws TypeError for types tilegrid lacks
DLDevice to_dlpack(Device device);
Device device_from_dlpack(DLDevice device);  // throws ValueError for other device kinds

}  // namespace tilegrid::dlpack
