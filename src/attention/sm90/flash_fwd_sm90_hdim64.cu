// Hopper flash attention forward kernels for head dimension 64 (sm_90a only).
#include "attention/sm90/flash_fwd_sm90_launch.cuh"

namespace tilegrid::attention::sm90 {

void forward_hdim64(const FlashFwdParams& p, DType dtype, int switches, Stream stream) {
  launch<64>(p, dtype, switches, stream);
}

}  // namespace tilegrid::attention::sm90
