// Flash attention forward kernels for head dimension 96 (bfloat16 and float16).
#include "attention/cuda/flash_fwd_launch.cuh"

namespace tilegrid::attention {

void forward_cuda_hdim96(const FlashFwdParams& p, DType dtype, Stream stream) {
  flash::launch_forward<96>(p, dtype, stream);
}

}  // namespace tilegrid::attention
