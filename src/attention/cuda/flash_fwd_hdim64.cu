// Flash attention forward kernels for head dimension 64 (bfloat16 and float16).
#include "attention/cuda/flash_fwd_launch.cuh"

namespace tilegrid::attention {

void forward_cuda_hdim64(const FlashFwdParams& p, DType dtype, Stream stream) {
  flash::launch_forward<64>(p, dtype, stream);
}

}  // namespace tilegrid::attention
