#pragma once
// CUDA back end of the RoPE rotation (internal); launches on `stream` of `device`.
#include "fusion/rope_rotate_params.h"
#include "tilegrid/core/device.h"

namespace tilegrid::rope {

void rotate_cuda(const Params& p, int device, Stream stream);

}  // namespace tilegrid::rope
