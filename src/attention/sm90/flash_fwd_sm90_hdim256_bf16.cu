// Hopper flash attention forward kernels for head dimension 256, bfloat16 with the default
// compile-time switches, every tile shape (sm_90a only).
#include "attention/sm90/flash_fwd_sm90_launch.cuh"

namespace tilegrid::attention::sm90 {

template void forward_part<256, KernelPart::Bf16>(const FlashFwdParams&, int, Stream);

}  // namespace tilegrid::attention::sm90
