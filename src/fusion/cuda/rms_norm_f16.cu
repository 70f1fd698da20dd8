// RMSNorm kernels for x in __half (weight in x's dtype or float32).
#include "fusion/cuda/rms_norm_launch.cuh"
#include "fusion/rms_norm_cuda.h"

namespace tilegrid::rms_norm {

void forward_cuda_f16(const ForwardParams& p, int device, Stream stream) {
  if (p.weight != nullptr && p.weight_dtype == DType::Float32)
    forward_launch<__half, float>(p, device, stream);
  else
    forward_launch<__half, __half>(p, device, stream);
}

void backward_cuda_f16(const BackwardParams& p, int device, Stream stream) {
  if (p.weight != nullptr && p.weight_dtype == DType::Float32)
    backward_launch<__half, float>(p, device, stream);
  else
    backward_launch<__half, __half>(p, device, stream);
}

}  // namespace tilegrid::rms_norm
