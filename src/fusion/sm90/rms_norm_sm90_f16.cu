// Hopper RMSNorm kernels for x in __half (weight in x's dtype or float32); compiled for sm_90a.
#include "fusion/sm90/rms_norm_sm90_launch.cuh"

namespace tilegrid::rms_norm::sm90 {

template bool try_forward<__half, __half>(const ForwardParams&, int, Stream);
template bool try_backward<__half, __half>(const BackwardParams&, int, Stream);
template bool try_forward<__half, float>(const ForwardParams&, int, Stream);
template bool try_backward<__half, float>(const BackwardParams&, int, Stream);

}  // namespace tilegrid::rms_norm::sm90
