// Hopper flash attention backward kernels for head dimension 256 (sm_90a only).
#include "attention/sm90/flash_bwd_sm90_launch.cuh"

namespace tilegrid::attention::sm90 {

void backward_hdim256(const FlashBwdParams& g, const BackwardWorkspace& ws, DType dtype,
                     int max_seqlen_k, Stream stream) {
  sm90_bwd::launch<256>(g, ws, dtype, max_seqlen_k, stream);
}

}  // namespace tilegrid::attention::sm90
