#pragma once
// CUDA back end of RMSNorm (internal); launches on `stream` of `device`.
#include <cstdint>

#include "fusion/rms_norm_params.h"
#include "tilegrid/core/device.h"

namespace tilegrid::rms_norm {

void forward_cuda(const ForwardParams& p, int device, Stream stream);
void backward_cuda(const BackwardParams& p, int device, Stream stream);

// One per x dtype, each in its own translation unit (cuda/rms_norm_<dtype>.cu); each handles
// both weight dtypes (x's own and float32).
void forward_cuda_f32(const ForwardParams& p, int device, Stream stream);
void forward_cuda_f16(const ForwardParams& p, int device, Stream stream);
void forward_cuda_bf16(const ForwardParams& p, int device, Stream stream);
void backward_cuda_f32(const BackwardParams& p, int device, Stream stream);
void backward_cuda_f16(const BackwardParams& p, int device, Stream stream);
void backward_cuda_bf16(const BackwardParams& p, int device, Stream stream);

// dweight[c] = sum over `num_partials` float32 rows of partial[., c], stored in dweight_dtype.
// One translation unit (cuda/rms_norm_reduce.cu) owns this kernel, so that no kernel is
// instantiated both in the generic and the sm_90a objects.
void reduce_weight_partials(const float* partial, int64_t num_partials, int64_t hidden,
                            void* dweight, DType dweight_dtype, Stream stream);

}  // namespace tilegrid::rms_norm
