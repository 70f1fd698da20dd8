// Hopper RMSNorm kernels for x in __nv_bfloat16 (weight in x's dtype or float32); compiled for sm_90a.
#include "fusion/sm90/rms_norm_sm90_launch.cuh"

namespace tilegrid::rms_norm::sm90 {

template bool try_forward<__nv_bfloat16, __nv_bfloat16>(const ForwardParams&, int, Stream);
template bool try_backward<__nv_bfloat16, __nv_bfloat16>(const BackwardParams&, int, Stream);
template bool try_forward<__nv_bfloat16, float>(const ForwardParams&, int, Stream);
template bool try_backward<__nv_bfloat16, float>(const BackwardParams&, int, Stream);

}  // namespace tilegrid::rms_norm::sm90
