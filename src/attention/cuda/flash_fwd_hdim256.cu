// Flash attention forward kernels for head dimension 256 (bfloat16 and float16).
#include "attention/cuda/flash_fwd_launch.cuh"

namespace tilegrid::attention {

void forward_cuda_hdim256(const FlashFwdParams& p, DType dtype, Stream stream) {
  flash::launch_forward<256>(p, dtype, stream);
}

}  // namespace tilegrid::attention
