#include "tilegrid/core/dlpack.h"

#include "tilegrid/core/error.h"

namespace tilegrid::dlpack {

DLDataType to_dlpack(DType dtype) {
  uint8_t bits = static_cast<uint8_t>(itemsize(dtype) * 8);
  switch (dtype) {
    case DType::Bool:
      return {kDLBool, 8, 1};
    case DType::UInt8:
      return {kDLUInt, 8, 1};
    case DType::Int32:
    case DType::Int64:
      return {kDLInt, bits, 1};
    case DType::BFloat16:
      return {kDLBfloat, 16, 1};
    case DType::Float16:
    case DType::Float32:
    case DType::Float64:
      return {kDLFloat, bits, 1};
  }
  throw TypeError("unknown tilegrid dtype");
}

DType dtype_from_dlpack(DLDataType dt) {
  TG_CHECK_TYPE(dt.lanes == 1, "DLPack: vector types (lanes=", dt.lanes, ") are not supported");
  switch (dt.code) {
    case kDLBool:
      if (dt.bits == 8) return DType::Bool;
      break;
    case kDLUInt:
      if (dt.bits == 8) return DType::UInt8;
      break;
    case kDLInt:
      if (dt.bits == 32) return DType::Int32;
      if (dt.bits == 64) return DType::Int64;
      break;
    case kDLBfloat:
      if (dt.bits == 16) return DType::BFloat16;
      break;
    case kDLFloat:
      if (dt.bits == 16) return DType::Float16;
      if (dt.bits == 32) return DType::Float32;
      if (dt.bits == 64) return DType::Float64;
      break;
    default:
      break;
  }
  throw TypeError(detail::concat(
      "DLPack: dtype (code ", int(dt.code), ", ", int(dt.bits),
      " bits) is not supported; expected bool, uint8, int32, int64, float16, bfloat16, "
      "float32 or float64"));
}

DLDevice to_dlpack(Device device) {
  return {device.is_cpu() ? kDLCPU : kDLCUDA, device.index};
}

Device device_from_dlpack(DLDevice device) {
  if (device.device_type == kDLCPU) return Device::cpu();
  if (device.device_type == kDLCUDA) return Device::cuda(device.device_id);
  throw ValueError(detail::concat("DLPack: device type ", device.device_type,
                                  " is not supported; expected CPU (1) or CUDA (2)"));
}

}  // namespace tilegrid::dlpack
