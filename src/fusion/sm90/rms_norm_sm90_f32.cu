// Hopper RMSNorm kernels for x in float (weight in x's dtype or float32); compiled for sm_90a.
#include "fusion/sm90/rms_norm_sm90_launch.cuh"

namespace tilegrid::rms_norm::sm90 {

template bool try_forward<float, float>(const ForwardParams&, int, Stream);
template bool try_backward<float, float>(const BackwardParams&, int, Stream);

}  // namespace tilegrid::rms_norm::sm90
