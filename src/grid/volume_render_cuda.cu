// volume_render on the GPU: one thread a ray through volume_render_ray.h, the CPU's code
// (compiled without FMA contraction; exp may differ from the host's in the last bits).
#include <algorithm>

#include "core/cuda_check.h"
#include "grid/volume_render_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 128;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20));
}

__global__ void forward_kernel(RenderSamples in, int64_t rays, RenderOutputs out) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rays;
       r += int64_t(gridDim.x) * blockDim.x)
    render_ray_forward(in, r, out);
}

__global__ void backward_kernel(RenderSamples in, int64_t rays, RenderGrads grads) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rays;
       r += int64_t(gridDim.x) * blockDim.x)
    render_ray_backward(in, r, grads);
}

}  // namespace

void volume_render(const RenderSamples& in, int64_t rays, const RenderOutputs& out, int device,
                   Stream stream) {
  if (rays == 0) return;
  CudaDeviceGuard guard(device);
  forward_kernel<<<blocks_for(rays), kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      in, rays, out);
  TG_CUDA_CHECK_LAUNCH();
}

void volume_render_backward(const RenderSamples& in, int64_t rays, const RenderGrads& grads,
                            int device, Stream stream) {
  if (rays == 0) return;
  CudaDeviceGuard guard(device);
  backward_kernel<<<blocks_for(rays), kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      in, rays, grads);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
