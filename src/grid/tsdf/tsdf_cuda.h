#pragma once
// The CUDA pass of integrate_tsdf (internal; tsdf_cuda.cu).
#include <cstdint>

#include "grid/tsdf/tsdf_voxel.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::grid::cuda {

void integrate_tsdf(const TsdfInputs& in, int64_t voxels, int device, Stream stream);

}  // namespace tilegrid::grid::cuda
