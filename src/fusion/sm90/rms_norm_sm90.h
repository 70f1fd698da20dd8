#pragma once
// Entry points of the Hopper RMSNorm kernels (internal). Each returns false, launching
// nothing, when the problem is not theirs (not a compute capability 9.x device, rows too short
// for a pipeline to pay, or too long for shared memory); the caller then runs the generic
// kernels. Callers guarantee the 16-byte alignment of every row and of the weight.
#include "fusion/rms_norm_params.h"
#include "tilegrid/core/device.h"

namespace tilegrid::rms_norm::sm90 {

template <class T, class W>
bool try_forward(const ForwardParams& p, int device, Stream stream);
template <class T, class W>
bool try_backward(const BackwardParams& p, int device, Stream stream);

}  // namespace tilegrid::rms_norm::sm90
