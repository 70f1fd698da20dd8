#pragma once
// The CUDA kernels of volume_render (internal; volume_render_cuda.cu): one warp a ray.
#include <cstdint>

#include "grid/render/volume_render_ray.h"
#include "tilegrid/core/device.h"

namespace tilegrid::grid::cuda {

void volume_render(const RenderSamples& in, int64_t rays, const RenderOutputs& out, int device,
                   Stream stream);
void volume_render_backward(const RenderSamples& in, int64_t rays, const RenderGrads& grads,
                            int device, Stream stream);

}  // namespace tilegrid::grid::cuda
