// Routes an RMSNorm problem to the translation unit of its x dtype.
#include "fusion/rms_norm_cuda.h"

namespace tilegrid::rms_norm {

void forward_cuda(const ForwardParams& p, int device, Stream stream) {
  switch (p.dtype) {
    case DType::Float32:
      return forward_cuda_f32(p, device, stream);
    case DType::Float16:
      return forward_cuda_f16(p, device, stream);
    default:
      return forward_cuda_bf16(p, device, stream);
  }
}

void backward_cuda(const BackwardParams& p, int device, Stream stream) {
  switch (p.dtype) {
    case DType::Float32:
      return backward_cuda_f32(p, device, stream);
    case DType::Float16:
      return backward_cuda_f16(p, device, stream);
    default:
      return backward_cuda_bf16(p, device, stream);
  }
}

}  // namespace tilegrid::rms_norm
