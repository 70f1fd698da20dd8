#pragma once
// The CUDA passes of the ray ops (internal; rays_cuda.cu): leaf
// boxes per grid, a count kernel and a write kernel (one thread a ray, trace_ray of
// ray_trace.h), the counts scanned into offsets. `allocate` is called once with the total, on
// the host, after the one synchronisation; the returned offsets (int64 [N + 1]) are on the GPU.
#include <cstdint>
#include <functional>

#include "grid/render/ray_trace.h"
#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid::cuda {

Tensor trace_rays(const GridBatch& grid, const RayInputs& in, const RayOptions& opt,
                  const std::function<RayOutputs(int64_t)>& allocate, Stream stream);

}  // namespace tilegrid::grid::cuda
