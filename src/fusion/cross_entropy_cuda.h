#pragma once
// CUDA back end of the cross-entropy rows (internal); launches on `stream` of `device`.
#include "fusion/cross_entropy_params.h"
#include "tilegrid/core/device.h"

namespace tilegrid::cross_entropy {

void loss_and_grad_cuda(const Params& p, int device, Stream stream);

}  // namespace tilegrid::cross_entropy
