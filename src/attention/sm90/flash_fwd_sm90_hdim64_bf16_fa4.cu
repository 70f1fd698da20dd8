// Hopper flash attention forward kernels for head dimension 64, bfloat16 with the other
// FlashAttention-4 switch combinations (sm_90a only).
#include "attention/sm90/flash_fwd_sm90_launch.cuh"

namespace tilegrid::attention::sm90 {

template void forward_part<64, KernelPart::Bf16Fa4>(const FlashFwdParams&, int, Stream);

}  // namespace tilegrid::attention::sm90
