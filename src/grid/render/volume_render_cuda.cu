// volume_render on the GPU: one warp a ray, in windows of kPer x 32 consecutive samples (lane l
// takes samples base + 32 p + l, p < kPer: coalesced loads, kPer of them in flight a lane).
// The transmittance before each sample comes from warp prefix sums of sigma * delta
// (T_i = exp(-sum_{j<i} sigma_j delta_j), the product of the 1 - alpha_j in closed form), the
// early exit from ballots, the backward's suffix sums of w g from a second prefix sum; a ray
// of at most one window keeps its samples in registers between the backward's two passes.
// One thread a ray (the CPU's loop) read 32 strided rows a load and ran 20x over the target
// at 1M rays x 128 samples. The rule is volume_render_ray.h's, in float64 as on the CPU,
// summed in another order: results agree with the CPU's to rounding, and the early exit may
// differ where T lands within rounding of the threshold.
#include <algorithm>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/render/volume_render_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kWarps = 4;  // rays a block
constexpr int kPer = 4;    // samples a lane a window: 128-sample windows
constexpr int kWindow = 32 * kPer;
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

// A lane's samples of one window: sigma, delta, their product x, the transmittance T before
// the sample, and whether it is marched (before the early exit).
struct Window {
  double sigma[kPer], delta[kPer], x[kPer], T[kPer];
  bool have[kPer], marched[kPer];
  bool exits;    // the early exit falls in this window
  int64_t stop;  // the first sample not marched, where it exits
};

// Loads a window's sigma and delta (the caller loads the rest in the same stretch) and marches
// it: `carry` is the sum of x over the ray's earlier windows, updated.
__device__ void march_window(const RenderSamples& in, int64_t base, int64_t last, int lane,
                             double& carry, Window& w) {
  const bool f = in.float64;
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t i = base + 32 * p + lane;
    w.have[p] = i < last;
    w.sigma[p] = w.have[p] ? load_real(in.sigmas, f, i) : 0.0;
    w.delta[p] = w.have[p] ? load_real(in.deltas, f, i) : 0.0;
  }
  w.exits = false;
  w.stop = last;
  bool before_exit = true;  // lanes of chunks before the exit's chunk are all marched
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    w.x[p] = w.sigma[p] * w.delta[p];
    const double incl = warp_inclusive_sum(w.x[p], lane);
    // The exclusive sum from the lane below (not incl - x: an infinite x would give inf - inf).
    const double below_sum = __shfl_up_sync(kAll, incl, 1);
    w.T[p] = exp(-(carry + (lane == 0 ? 0.0 : below_sum)));
    carry += __shfl_sync(kAll, incl, 31);
    const unsigned below = before_exit ? __ballot_sync(kAll, w.have[p] && w.T[p] < in.threshold) : 0u;
    if (below != 0u) {
      const int cut = __ffs(static_cast<int>(below)) - 1;
      w.exits = true;
      w.stop = base + 32 * p + cut;
      w.marched[p] = w.have[p] && lane < cut;
      before_exit = false;
    } else {
      w.marched[p] = w.have[p] && before_exit;
    }
  }
}

// kC: the channel count when known at compile time (1 to 4), else 0 (any, from in.channels,
// summed kRenderChunk channels a march as on the CPU).
template <int kC>
__global__ void __launch_bounds__(32 * kWarps) forward_kernel(RenderSamples in, int64_t rays,
                                                             RenderOutputs out) {
  const int lane = threadIdx.x & 31;
  const bool f = in.float64;
  const int64_t C = kC > 0 ? kC : in.channels;
  constexpr int kAcc = kC > 0 ? kC : kRenderChunk;
  for (int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32; r < rays;
       r += int64_t(gridDim.x) * kWarps) {
    const int64_t first = in.offsets[r], last = in.offsets[r + 1];
    int64_t end = last;
    for (int64_t c0 = 0; c0 < (C > 0 ? C : 1); c0 += kAcc) {
      const int64_t width = std::min<int64_t>(C - c0, kAcc);
      double acc[kAcc] = {};
      double depth = 0.0, opacity = 0.0, carry = 0.0;
      int64_t stop = last;
      for (int64_t base = first; base < last; base += kWindow) {
        double t[kPer];
#pragma unroll
        for (int p = 0; p < kPer; ++p) {
          const int64_t i = base + 32 * p + lane;
          t[p] = (c0 == 0 && i < last) ? load_real(in.ts, f, i) : 0.0;
        }
        Window w;
        march_window(in, base, last, lane, carry, w);
#pragma unroll
        for (int p = 0; p < kPer; ++p) {
          const int64_t i = base + 32 * p + lane;
          const double wt = w.marched[p] ? w.T[p] * (1.0 - exp(-w.x[p])) : 0.0;
          if (w.marched[p]) {
#pragma unroll
            for (int k = 0; k < kAcc; ++k)
              if (k < width) acc[k] += wt * load_real(in.rgbs, f, i * C + c0 + k);
          }
          if (c0 == 0) {
            if (w.have[p]) store_real(out.weights, f, i, wt);
            depth += wt * t[p];
            opacity += wt;
          }
        }
        if (w.exits) {
          stop = w.stop;
          break;
        }
      }
#pragma unroll
      for (int k = 0; k < kAcc; ++k) {
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

// The backward's per-lane state of a window: the samples' weights, their g (the gradient
// reaching each weight, volume_render_ray.h) and T * (1 - alpha), the transmittance after.
struct WindowGrads {
  Window w;
  double weight[kPer], gain[kPer], after[kPer];
};

template <int kC>
__device__ void gains_of_window(const RenderSamples& in, const RenderGrads& g, int64_t r,
                                int64_t base, int64_t last, int lane, double d_depth,
                                double d_opacity, const double* d_rgb, double& carry,
                                WindowGrads& s) {
  const bool f = in.float64;
  const int64_t C = kC > 0 ? kC : in.channels;
  double t[kPer], gw[kPer];
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t i = base + 32 * p + lane;
    t[p] = i < last ? load_real(in.ts, f, i) : 0.0;
    gw[p] = (g.weights != nullptr && i < last) ? load_real(g.weights, f, i) : 0.0;
  }
  march_window(in, base, last, lane, carry, s.w);
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t i = base + 32 * p + lane;
    const double keep = exp(-s.w.x[p]);
    s.weight[p] = s.w.marched[p] ? s.w.T[p] * (1.0 - keep) : 0.0;
    s.after[p] = s.w.T[p] * keep;
    double gi = 0.0;
    if (s.w.marched[p]) {
      gi = d_depth * t[p] + d_opacity + gw[p];
      if (kC > 0) {
#pragma unroll
        for (int c = 0; c < (kC > 0 ? kC : 1); ++c) gi += d_rgb[c] * load_real(in.rgbs, f, i * C + c);
      } else {
        for (int64_t c = 0; c < C; ++c) gi += load_real(g.rgb, f, r * C + c) * load_real(in.rgbs, f, i * C + c);
      }
    }
    s.gain[p] = gi;
  }
}

template <int kC>
__device__ void store_window_grads(const RenderSamples& in, const RenderGrads& g, int64_t r,
                                   int64_t base, int64_t end, int lane, double d_depth,
                                   const double* d_rgb, double total, double& prefix,
                                   const WindowGrads& s) {
  const bool f = in.float64;
  const int64_t C = kC > 0 ? kC : in.channels;
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t i = base + 32 * p + lane;
    const bool marched = i < end;  // as pass 1 decided
    const double wg = marched ? s.weight[p] * s.gain[p] : 0.0;
    const double incl = prefix + warp_inclusive_sum(wg, lane);
    prefix = __shfl_sync(kAll, incl, 31);
    if (!marched) continue;
    const double bracket = s.after[p] * s.gain[p] - (total - incl);
    store_real(g.sigmas, f, i, s.w.delta[p] * bracket);
    store_real(g.deltas, f, i, s.w.sigma[p] * bracket);
    store_real(g.ts, f, i, s.weight[p] * d_depth);
    if (kC > 0) {
#pragma unroll
      for (int c = 0; c < (kC > 0 ? kC : 1); ++c) store_real(g.rgbs, f, i * C + c, s.weight[p] * d_rgb[c]);
    } else {
      for (int64_t c = 0; c < C; ++c)
        store_real(g.rgbs, f, i * C + c, s.weight[p] * load_real(g.rgb, f, r * C + c));
    }
  }
}

template <int kC>
__global__ void __launch_bounds__(32 * kWarps) backward_kernel(RenderSamples in, int64_t rays,
                                                              RenderGrads g) {
  const int lane = threadIdx.x & 31;
  const bool f = in.float64;
  const int64_t C = kC > 0 ? kC : in.channels;
  for (int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32; r < rays;
       r += int64_t(gridDim.x) * kWarps) {
    const int64_t first = in.offsets[r], last = in.offsets[r + 1];
    const double d_depth = load_real(g.depth, f, r), d_opacity = load_real(g.opacity, f, r);
    double d_rgb[kC > 0 ? kC : 1] = {};
    if (kC > 0) {
#pragma unroll
      for (int c = 0; c < (kC > 0 ? kC : 1); ++c) d_rgb[c] = load_real(g.rgb, f, r * C + c);
    }
    // Pass 1: where the march stops, and sum_k w_k g_k over the marched samples.
    double carry = 0.0, total = 0.0;
    int64_t end = last;
    WindowGrads s;
    for (int64_t base = first; base < last; base += kWindow) {
      gains_of_window<kC>(in, g, r, base, last, lane, d_depth, d_opacity, d_rgb, carry, s);
#pragma unroll
      for (int p = 0; p < kPer; ++p) total += s.weight[p] * s.gain[p];
      if (s.w.exits) {
        end = s.w.stop;
        break;
      }
    }
    total = warp_sum(total);
    // Pass 2: the marched samples' gradients, the suffix sum as total minus the prefix; a
    // ray of one window still has its samples in registers.
    double prefix = 0.0;
    if (last - first <= kWindow) {
      if (first < end) store_window_grads<kC>(in, g, r, first, end, lane, d_depth, d_rgb, total, prefix, s);
    } else {
      carry = 0.0;
      for (int64_t base = first; base < end; base += kWindow) {
        gains_of_window<kC>(in, g, r, base, last, lane, d_depth, d_opacity, d_rgb, carry, s);
        store_window_grads<kC>(in, g, r, base, end, lane, d_depth, d_rgb, total, prefix, s);
      }
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

template <template <int> class Launch, typename... Args>
void by_channels(int64_t channels, Args&&... args) {
  switch (channels) {
    case 1: Launch<1>::run(args...); break;
    case 3: Launch<3>::run(args...); break;
    case 4: Launch<4>::run(args...); break;
    default: Launch<0>::run(args...); break;
  }
}

template <int kC>
struct LaunchForward {
  static void run(const RenderSamples& in, int64_t rays, const RenderOutputs& out, cudaStream_t s) {
    forward_kernel<kC><<<grid_stride_blocks(rays, kWarps), 32 * kWarps, 0, s>>>(in, rays, out);
  }
};

template <int kC>
struct LaunchBackward {
  static void run(const RenderSamples& in, int64_t rays, const RenderGrads& grads, cudaStream_t s) {
    backward_kernel<kC><<<grid_stride_blocks(rays, kWarps), 32 * kWarps, 0, s>>>(in, rays, grads);
  }
};

}  // namespace

void volume_render(const RenderSamples& in, int64_t rays, const RenderOutputs& out, int device,
                   Stream stream) {
  if (rays == 0) return;
  CudaDeviceGuard guard(device);
  by_channels<LaunchForward>(in.channels, in, rays, out, static_cast<cudaStream_t>(stream.handle));
  TG_CUDA_CHECK_LAUNCH();
}

void volume_render_backward(const RenderSamples& in, int64_t rays, const RenderGrads& grads,
                            int device, Stream stream) {
  if (rays == 0) return;
  CudaDeviceGuard guard(device);
  by_channels<LaunchBackward>(in.channels, in, rays, grads, static_cast<cudaStream_t>(stream.handle));
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::grid::cuda
