// volume_render on the GPU: one warp a ray. The 32 lanes take 32 consecutive samples at a time
// (coalesced loads, where one thread a ray read 32 strided rows a load and ran 20x over the
// target at 1M rays x 128 samples), the transmittance before each sample from a warp prefix
// sum of sigma * delta (T_i = exp(-sum_{j<i} sigma_j delta_j), the product of the 1 - alpha_j
// in closed form), the early exit from a ballot, the backward's suffix sums of w g from a
// second prefix sum. The rule is volume_render_ray.h's, in float64 as on the CPU, summed in
// another order: results agree with the CPU's to rounding, the early exit may differ where T
// lands within rounding of the threshold.
#include <algorithm>

#include "core/cuda_check.h"
#include "grid/volume_render_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kWarps = 8;  // rays a block
constexpr unsigned kAll = 0xffffffffu;

__device__ double warp_inclusive_sum(double v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const double u = __shfl_up_sync(kAll, v, d);
    if (lane >= d) v += u;
  }
  return v;
}

__device__ double warp_sum(double v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kAll, v, d);
  return v;
}

// Where a ray's march is, 32 samples at a time: the lane's sample, its sigma * delta and the
// transmittance before it, and the lanes still marched (before the early exit).
struct Chunk {
  int64_t i;
  bool have, marched;
  double x, T;
  bool exits;  // the early exit falls in this chunk
  int64_t stop;  // first sample not marched, where exits
};

__device__ Chunk march_chunk(const RenderSamples& in, int64_t base, int64_t last, int lane,
                             double& carry) {
  Chunk c;
  c.i = base + lane;
  c.have = c.i < last;
  c.x = c.have ? load_real(in.sigmas, in.float64, c.i) * load_real(in.deltas, in.float64, c.i) : 0.0;
  const double incl = warp_inclusive_sum(c.x, lane);
  c.T = exp(-(carry + incl - c.x));
  const unsigned below = __ballot_sync(kAll, c.have && c.T < in.threshold);
  const int cut = below ? __ffs(static_cast<int>(below)) - 1 : 32;
  c.marched = c.have && lane < cut;
  c.exits = below != 0;
  c.stop = base + cut;
  carry += __shfl_sync(kAll, incl, 31);
  return c;
}

__global__ void __launch_bounds__(32 * kWarps) forward_kernel(RenderSamples in, int64_t rays,
                                                             RenderOutputs out) {
  const int lane = threadIdx.x & 31;
  const bool f = in.float64;
  const int64_t C = in.channels;
  for (int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32; r < rays;
       r += int64_t(gridDim.x) * kWarps) {
    const int64_t first = in.offsets[r], last = in.offsets[r + 1];
    int64_t end = last;
    // One march a chunk of kRenderChunk channels (registers for the sums), as on the CPU.
    for (int64_t c0 = 0; c0 < (C > 0 ? C : 1); c0 += kRenderChunk) {
      const int64_t width = std::min<int64_t>(C - c0, kRenderChunk);
      double acc[kRenderChunk] = {};
      double depth = 0.0, opacity = 0.0, carry = 0.0;
      int64_t stop = last;
      for (int64_t base = first; base < last; base += 32) {
        const Chunk c = march_chunk(in, base, last, lane, carry);
        const double w = c.marched ? c.T * (1.0 - exp(-c.x)) : 0.0;
        if (c.marched) {
#pragma unroll
          for (int k = 0; k < kRenderChunk; ++k)
            if (k < width) acc[k] += w * load_real(in.rgbs, f, c.i * C + c0 + k);
        }
        if (c0 == 0) {
          if (c.have) store_real(out.weights, f, c.i, w);
          if (c.marched) depth += w * load_real(in.ts, f, c.i);
          opacity += w;
        }
        if (c.exits) {
          stop = c.stop;
          break;
        }
      }
#pragma unroll
      for (int k = 0; k < kRenderChunk; ++k) {
        if (k >= width) break;
        const double v = warp_sum(acc[k]);
        if (lane == 0) store_real(out.rgb, f, r * C + c0 + k, v);
      }
      if (c0 == 0) {
        depth = warp_sum(depth);
        opacity = warp_sum(opacity);
        if (lane == 0) {
          store_real(out.depth, f, r, depth);
          store_real(out.opacity, f, r, opacity);
        }
        end = stop;
      }
    }
    for (int64_t k = end + lane; k < last; k += 32) store_real(out.weights, f, k, 0.0);
    if (lane == 0) out.count[r] = end - first;
  }
}

// g_i: the gradient reaching sample i's weight (volume_render_ray.h).
__device__ double gain(const RenderSamples& in, const RenderGrads& g, int64_t r, int64_t i,
                       double d_depth, double d_opacity) {
  const bool f = in.float64;
  const int64_t C = in.channels;
  double s = d_depth * load_real(in.ts, f, i) + d_opacity;
  for (int64_t c = 0; c < C; ++c) s += load_real(g.rgb, f, r * C + c) * load_real(in.rgbs, f, i * C + c);
  if (g.weights != nullptr) s += load_real(g.weights, f, i);
  return s;
}

__global__ void __launch_bounds__(32 * kWarps) backward_kernel(RenderSamples in, int64_t rays,
                                                              RenderGrads g) {
  const int lane = threadIdx.x & 31;
  const bool f = in.float64;
  const int64_t C = in.channels;
  for (int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32; r < rays;
       r += int64_t(gridDim.x) * kWarps) {
    const int64_t first = in.offsets[r], last = in.offsets[r + 1];
    const double d_depth = load_real(g.depth, f, r), d_opacity = load_real(g.opacity, f, r);
    // Pass 1: where the march stops, and sum_k w_k g_k over the marched samples.
    double carry = 0.0, total = 0.0;
    int64_t end = last;
    for (int64_t base = first; base < last; base += 32) {
      const Chunk c = march_chunk(in, base, last, lane, carry);
      if (c.marched) total += c.T * (1.0 - exp(-c.x)) * gain(in, g, r, c.i, d_depth, d_opacity);
      if (c.exits) {
        end = c.stop;
        break;
      }
    }
    total = warp_sum(total);
    // Pass 2: the marched samples' gradients, the suffix sum as total minus the prefix.
    carry = 0.0;
    double prefix = 0.0;
    for (int64_t base = first; base < end; base += 32) {
      Chunk c = march_chunk(in, base, last, lane, carry);
      c.marched = c.i < end;  // as pass 1 decided
      const double keep = exp(-c.x);
      const double w = c.marched ? c.T * (1.0 - keep) : 0.0;
      const double gi = c.marched ? gain(in, g, r, c.i, d_depth, d_opacity) : 0.0;
      const double incl = prefix + warp_inclusive_sum(w * gi, lane);
      prefix = __shfl_sync(kAll, incl, 31);
      if (!c.marched) continue;
      const double sigma = load_real(in.sigmas, f, c.i), delta = load_real(in.deltas, f, c.i);
      const double bracket = c.T * keep * gi - (total - incl);
      store_real(g.sigmas, f, c.i, delta * bracket);
      store_real(g.deltas, f, c.i, sigma * bracket);
      store_real(g.ts, f, c.i, w * d_depth);
      for (int64_t k = 0; k < C; ++k)
        store_real(g.rgbs, f, c.i * C + k, w * load_real(g.rgb, f, r * C + k));
    }
    // The samples after the early exit get no gradient.
    for (int64_t k = end + lane; k < last; k += 32) {
      store_real(g.sigmas, f, k, 0.0);
      store_real(g.deltas, f, k, 0.0);
      store_real(g.ts, f, k, 0.0);
    }
    for (int64_t k = end * C + lane; k < last * C; k += 32) store_real(g.rgbs, f, k, 0.0);
  }
}

unsigned blocks_for(int64_t rays) {
  return static_cast<unsigned>(std::min<int64_t>((rays + kWarps - 1) / kWarps, 1 << 20));
}

}  // namespace

void volume_render(const RenderSamples& in, int64_t rays, const RenderOutputs& out, int device,
                   Stream stream) {
  if (rays == 0) return;
  CudaDeviceGuard guard(device);
  forward_kernel<<<blocks_for(rays), 32 * kWarps, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      in, rays, out);
  TG_CUDA_CHECK_LAUNCH();
}

void volume_render_backward(const RenderSamples& in, int64_t rays, const RenderGrads& grads,
                            int device, Stream stream) {
  if (rays == 0) return;
  CudaDeviceGuard guard(device);
  backward_kernel<<<blocks_for(rays), 32 * kWarps, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      in, rays, grads);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
