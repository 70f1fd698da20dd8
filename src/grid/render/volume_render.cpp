// volume_render: argument checks, the CPU loops (one ray a task, on every core) and dispatch
// to the CUDA kernels; both run volume_render_ray.h.
#include "tilegrid/grid/volume_render.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cuda_build.h"
#include "core/parallel_for.h"
#include "grid/render/volume_render_ray.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/error.h"
#include "tilegrid/core/tensor.h"
#ifdef TILEGRID_WITH_CUDA
#include "core/cuda_copy.h"
#include "core/jagged_cuda.h"
#include "grid/render/volume_render_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

constexpr const char* kOp = "volume_render";

void check_like(const char* name, const TensorView& t, const Shape& shape, DType dtype,
                Device device) {
  check_dtype(kOp, name, t, {dtype});
  check_shape(kOp, name, t, shape);
  check_contiguous(kOp, name, t);
  TG_CHECK_VALUE(t.device == device, kOp, ": ", name, " is on ", t.device, " but sigmas are on ",
                 device);
}

// Validates the samples (on a GPU the offsets by a kernel and a 4-byte read back, which waits
// for `stream`); returns what the per-ray code reads.
RenderSamples check_samples(const VolumeRenderInputs& in, Stream stream, int64_t& rays) {
  check_dtype(kOp, "sigmas", in.sigmas, {DType::Float32, DType::Float64});
  check_ndim(kOp, "sigmas", in.sigmas, 1);
  const int64_t S = in.sigmas.size(0);
  const DType dt = in.sigmas.dtype;
  const Device dev = in.sigmas.device;
  check_contiguous(kOp, "sigmas", in.sigmas);
  check_ndim(kOp, "rgbs", in.rgbs, 2);
  const int64_t C = in.rgbs.size(1);
  check_like("rgbs", in.rgbs, {S, C}, dt, dev);
  check_like("deltas", in.deltas, {S}, dt, dev);
  check_like("ts", in.ts, {S}, dt, dev);
  check_dtype(kOp, "offsets", in.offsets, {DType::Int64});
  check_ndim(kOp, "offsets", in.offsets, 1);
  check_contiguous(kOp, "offsets", in.offsets);
  TG_CHECK_VALUE(in.offsets.device == dev, kOp, ": offsets are on ", in.offsets.device,
                 " but sigmas are on ", dev);
  TG_CHECK_VALUE(in.offsets.size(0) >= 1, kOp, ": offsets must hold at least one entry (0)");
  TG_CHECK_VALUE(std::isfinite(in.transmittance_threshold) && in.transmittance_threshold >= 0 &&
                     in.transmittance_threshold <= 1,
                 kOp, ": transmittance_threshold must be in [0, 1], got ",
                 in.transmittance_threshold);
  rays = in.offsets.size(0) - 1;
  const RenderSamples samples{in.sigmas.data, in.rgbs.data, in.deltas.data, in.ts.data,
                              in.offsets.data_ptr<const int64_t>(), C, dt == DType::Float64,
                              in.transmittance_threshold};
  std::vector<int64_t> host;
  const int64_t* off = samples.offsets;
  if (dev.is_cuda()) {
#ifdef TILEGRID_WITH_CUDA
    // One kernel checks them; only wrong ones are copied to the host, to say where.
    if (::tilegrid::cuda::offsets_valid(off, rays, S, dev.index, stream)) return samples;
    host.resize(size_t(rays + 1));
    ::tilegrid::cuda::copy_to_host(host.data(), off, sizeof(int64_t) * host.size(), dev.index, stream);
    off = host.data();
#endif
  }
  TG_CHECK_VALUE(off[0] == 0 && off[rays] == S, kOp, ": offsets must run from 0 to the ",
                 S, " samples, got ", off[0], " .. ", off[rays]);
  for (int64_t r = 0; r < rays; ++r)
    TG_CHECK_VALUE(off[r] <= off[r + 1], kOp, ": offsets must not decrease, got ", off[r],
                   " then ", off[r + 1], " at ray ", r);
  return samples;
}

}  // namespace

void volume_render(const VolumeRenderInputs& in, const TensorView& rgb, const TensorView& depth,
                   const TensorView& opacity, const TensorView& weights, const TensorView& count,
                   Stream stream) {
  int64_t rays = 0;
  const RenderSamples s = check_samples(in, stream, rays);
  const DType dt = in.sigmas.dtype;
  const Device dev = in.sigmas.device;
  check_like("rgb", rgb, {rays, s.channels}, dt, dev);
  check_like("depth", depth, {rays}, dt, dev);
  check_like("opacity", opacity, {rays}, dt, dev);
  check_like("weights", weights, {in.sigmas.size(0)}, dt, dev);
  check_like("count", count, {rays}, DType::Int64, dev);
  const RenderOutputs out{rgb.data, depth.data, opacity.data, weights.data,
                          static_cast<int64_t*>(count.data)};
  if (dev.is_cuda()) {
    require_cuda_build("volume_render");
#ifdef TILEGRID_WITH_CUDA
    cuda::volume_render(s, rays, out, dev.index, stream);
    return;
#endif
  }
  parallel_for(rays, [&](int64_t r) { render_ray_forward(s, r, out); });
}

void volume_render_backward(const VolumeRenderInputs& in, const TensorView& grad_rgb,
                            const TensorView& grad_depth, const TensorView& grad_opacity,
                            const std::optional<TensorView>& grad_weights,
                            const TensorView& grad_sigmas, const TensorView& grad_rgbs,
                            const TensorView& grad_deltas, const TensorView& grad_ts,
                            Stream stream) {
  int64_t rays = 0;
  const RenderSamples s = check_samples(in, stream, rays);
  const DType dt = in.sigmas.dtype;
  const Device dev = in.sigmas.device;
  const int64_t S = in.sigmas.size(0);
  check_like("grad_rgb", grad_rgb, {rays, s.channels}, dt, dev);
  check_like("grad_depth", grad_depth, {rays}, dt, dev);
  check_like("grad_opacity", grad_opacity, {rays}, dt, dev);
  if (grad_weights) check_like("grad_weights", *grad_weights, {S}, dt, dev);
  check_like("grad_sigmas", grad_sigmas, {S}, dt, dev);
  check_like("grad_rgbs", grad_rgbs, {S, s.channels}, dt, dev);
  check_like("grad_deltas", grad_deltas, {S}, dt, dev);
  check_like("grad_ts", grad_ts, {S}, dt, dev);
  const RenderGrads g{grad_rgb.data, grad_depth.data, grad_opacity.data,
                      grad_weights ? grad_weights->data : nullptr, grad_sigmas.data,
                      grad_rgbs.data, grad_deltas.data, grad_ts.data};
  if (dev.is_cuda()) {
    require_cuda_build("volume_render");
#ifdef TILEGRID_WITH_CUDA
    cuda::volume_render_backward(s, rays, g, dev.index, stream);
    return;
#endif
  }
  parallel_for(rays, [&](int64_t r) { render_ray_backward(s, r, g); });
}

}  // namespace tilegrid::grid
