// Flash attention forward kernels for head dimension 192 (bfloat16 and float16).
#include "attention/cuda/flash_fwd_launch.cuh"

namespace tilegrid::attention {

void forward_cuda_hdim192(const FlashFwdParams& p, DType dtype, Stream stream) {
  flash::launch_forward<192>(p, dtype, stream);
}

}  // namespace tilegrid::attention
