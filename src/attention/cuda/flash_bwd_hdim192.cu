// Portable attention backward kernels for head dimension 192 (bfloat16 and float16).
#include "attention/cuda/flash_bwd_launch.cuh"

namespace tilegrid::attention {

void backward_cuda_hdim192(const FlashBwdParams& g, DType dtype, int max_seqlen_k, Stream stream) {
  flash_bwd::launch<192>(g, dtype, max_seqlen_k, stream);
}

}  // namespace tilegrid::attention
