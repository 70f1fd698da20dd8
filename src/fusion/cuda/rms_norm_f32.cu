// RMSNorm kernels for x in float (weight in x's dtype or float32).
#include "fusion/cuda/rms_norm_launch.cuh"
#include "fusion/rms_norm_cuda.h"

namespace tilegrid::rms_norm {

void forward_cuda_f32(const ForwardParams& p, int device, Stream stream) {
  forward_launch<float, float>(p, device, stream);
}

void backward_cuda_f32(const BackwardParams& p, int device, Stream stream) {
  backward_launch<float, float>(p, device, stream);
}

}  // namespace tilegrid::rms_norm
