// RMSNorm kernels for x in __nv_bfloat16 (weight in x's dtype or float32).
#include "fusion/cuda/rms_norm_launch.cuh"
#include "fusion/rms_norm_cuda.h"

namespace tilegrid::rms_norm {

void forward_cuda_bf16(const ForwardParams& p, int device, Stream stream) {
  if (p.weight != nullptr && p.weight_dtype == DType::Float32)
    forward_launch<__nv_bfloat16, float>(p, device, stream);
  else
    forward_launch<__nv_bfloat16, __nv_bfloat16>(p, device, stream);
}

void backward_cuda_bf16(const BackwardParams& p, int device, Stream stream) {
  if (p.weight != nullptr && p.weight_dtype == DType::Float32)
    backward_launch<__nv_bfloat16, float>(p, device, stream);
  else
    backward_launch<__nv_bfloat16, __nv_bfloat16>(p, device, stream);
}

}  // namespace tilegrid::rms_norm
