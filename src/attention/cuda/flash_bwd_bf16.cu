// Portable attention backward kernels for bfloat16 inputs, every head dimension.
#include "attention/attention_cuda.h"
#include "attention/cuda/flash_bwd_launch.cuh"

namespace tilegrid::attention {

void backward_cuda_bf16(const FlashBwdParams& g, int head_dim, int max_seqlen_k, Stream stream) {
  flash_bwd::launch<__nv_bfloat16>(g, head_dim, max_seqlen_k,
                                   static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::attention
