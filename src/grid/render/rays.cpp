// The ray ops (rays.h): argument checks, the CPU loops (two passes over the
// rays, count then write, on every core), and dispatch to the CUDA kernels (rays_cuda.cu),
// which run the same trace_ray.
#include "tilegrid/grid/rays.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda_build.h"
#include "core/parallel_for.h"
#include "grid/render/ray_trace.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/render/rays_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

struct Checked {
  RayInputs in;
  DType dtype;
};

Checked check_rays(const char* op, const GridBatch& grid, const JaggedTensor& origins,
                   const JaggedTensor& directions, const char* max_name, int64_t max_out,
                   double eps) {
  const TensorView& o = origins.jdata();
  const TensorView& d = directions.jdata();
  check_dtype(op, "ray_origins", o, {DType::Float32, DType::Float64});
  check_dtype(op, "ray_directions", d, {o.dtype});
  check_ndim(op, "ray_origins", o, 2);
  check_shape(op, "ray_origins", o, {o.size(0), 3});
  check_shape(op, "ray_directions", d, {o.size(0), 3});
  check_contiguous(op, "ray_origins", o);
  check_contiguous(op, "ray_directions", d);
  TG_CHECK_VALUE(o.device == grid.device() && d.device == grid.device(), op,
                 ": rays must be on the grid's device (", grid.device(), "), got ", o.device,
                 " and ", d.device);
  TG_CHECK_VALUE(origins.num_tensors() == grid.num_grids(), op, ": ray_origins hold ",
                 origins.num_tensors(), " tensors but the batch has ", grid.num_grids(), " grids");
  TG_CHECK_VALUE(directions.num_tensors() == grid.num_grids(), op, ": ray_directions hold ",
                 directions.num_tensors(), " tensors but the batch has ", grid.num_grids(),
                 " grids");
  TG_CHECK_VALUE(max_out >= 1, op, ": ", max_name, " must be at least 1, got ", max_out);
  TG_CHECK_VALUE(std::isfinite(eps) && eps >= 0, op, ": eps must be finite and >= 0, got ", eps);
  // Both jagged the same way: one offsets tensor, or equal ones compared on the host (a copy
  // each for GPU offsets).
  if (origins.joffsets().data() != directions.joffsets().data()) {
    const Tensor oo = origins.joffsets().to(Device::cpu());
    const Tensor od = directions.joffsets().to(Device::cpu());
    TG_CHECK_VALUE(std::memcmp(oo.data(), od.data(), sizeof(int64_t) * size_t(oo.numel())) == 0,
                   op, ": ray_origins and ray_directions must be jagged alike (same offsets)");
  }
  return {{o.data, d.data, o.dtype == DType::Float64,
           origins.joffsets().view().data_ptr<const int64_t>(), grid.num_grids(), o.size(0)},
          o.dtype};
}

// Leaf bounding boxes per grid, on the CPU.
std::vector<int32_t> leaf_boxes_cpu(const GridBatch& grid) {
  std::vector<int32_t> boxes(size_t(6 * grid.num_grids()));
  for (int64_t b = 0; b < grid.num_grids(); ++b)
    for (int a = 0; a < 3; ++a) {
      boxes[size_t(6 * b + a)] = INT32_MAX;
      boxes[size_t(6 * b + 3 + a)] = INT32_MIN;
    }
  const TreeView tree = grid.view();
  const auto* voxel_offsets = grid.voxel_offsets().view().data_ptr<const int64_t>();
  for (int64_t l = 0; l < grid.num_leaves(); ++l) {
    const LeafNode& leaf = tree.leaves[l];
    const int64_t b = grid_of_row(voxel_offsets, grid.num_grids(), leaf.first_voxel);
    const int32_t o[3] = {leaf.origin.i, leaf.origin.j, leaf.origin.k};
    for (int a = 0; a < 3; ++a) {
      int32_t& lo = boxes[size_t(6 * b + a)];
      int32_t& hi = boxes[size_t(6 * b + 3 + a)];
      lo = o[a] < lo ? o[a] : lo;
      hi = o[a] + 8 > hi ? o[a] + 8 : hi;
    }
  }
  return boxes;
}

// Both passes on the CPU; returns the offsets and fills outputs allocated by `allocate`.
template <class Allocate>
Tensor trace_cpu(const GridBatch& grid, const RayInputs& in, const RayOptions& opt,
                 Allocate allocate) {
  const std::vector<int32_t> box_data = leaf_boxes_cpu(grid);
  const GridBoxes boxes{box_data.data()};
  const TreeView tree = grid.view();
  const VoxelTransform* transforms = grid.transforms();
  Tensor offsets = Tensor::empty({in.num_rays + 1}, DType::Int64, Device::cpu());
  auto* off = static_cast<int64_t*>(offsets.data());
  off[0] = 0;
  parallel_for(in.num_rays, [&](int64_t n) {
    off[n + 1] = trace_ray(tree, transforms, boxes, in, n, opt, 0, {});
  });
  for (int64_t n = 0; n < in.num_rays; ++n) off[n + 1] += off[n];
  const RayOutputs out = allocate(off[in.num_rays]);
  parallel_for(in.num_rays, [&](int64_t n) {
    trace_ray(tree, transforms, boxes, in, n, opt, off[n], out);
  });
  return offsets;
}

RayOptions options(RayMode mode, int64_t max_out, double eps) {
  RayOptions o;
  o.mode = mode;
  o.max_out = max_out;
  o.eps = eps;
  return o;
}

// Runs both passes on the grid's device; returns the offsets.
template <class Allocate>
Tensor trace(const char* op, const GridBatch& grid, const RayInputs& in, const RayOptions& opt,
             Allocate allocate, Stream stream) {
  if (grid.device().is_cuda()) {
    require_cuda_build(op);
#ifdef TILEGRID_WITH_CUDA
    return cuda::trace_rays(grid, in, opt, allocate, stream);
#endif
  }
  return trace_cpu(grid, in, opt, allocate);
}

// A per-ray tensor [N] of the rays' dtype on their device, as a JaggedTensor like the rays.
void check_per_ray(const char* op, const char* name, const JaggedTensor& t, const Checked& c,
                   const GridBatch& grid) {
  const TensorView& v = t.jdata();
  check_dtype(op, name, v, {c.dtype});
  check_shape(op, name, v, {c.in.num_rays});
  check_contiguous(op, name, v);
  TG_CHECK_VALUE(v.device == grid.device(), op, ": ", name, " must be on the grid's device (",
                 grid.device(), "), got ", v.device);
}

}  // namespace

RayVoxels voxels_along_rays(const GridBatch& grid, const JaggedTensor& origins,
                            const JaggedTensor& directions, int64_t max_voxels, double eps,
                            Stream stream) {
  constexpr const char* kOp = "voxels_along_rays";
  const Checked c = check_rays(kOp, grid, origins, directions, "max_voxels", max_voxels, eps);
  RayVoxels r;
  const Device device = grid.device();
  auto allocate = [&](int64_t hits) {
    r.rows = Tensor::empty({hits}, DType::Int64, device, stream);
    r.ijk = Tensor::empty({hits, 3}, DType::Int32, device, stream);
    r.times = Tensor::empty({hits, 2}, c.dtype, device, stream);
    return RayOutputs{static_cast<int64_t*>(r.rows.data()), static_cast<int32_t*>(r.ijk.data()),
                      r.times.data()};
  };
  r.offsets = trace(kOp, grid, c.in, options(RayMode::Voxels, max_voxels, eps), allocate, stream);
  return r;
}

RaySegments segments_along_rays(const GridBatch& grid, const JaggedTensor& origins,
                                const JaggedTensor& directions, int64_t max_segments, double eps,
                                Stream stream) {
  constexpr const char* kOp = "segments_along_rays";
  const Checked c = check_rays(kOp, grid, origins, directions, "max_segments", max_segments, eps);
  RaySegments r;
  const Device device = grid.device();
  auto allocate = [&](int64_t segments) {
    r.times = Tensor::empty({segments, 2}, c.dtype, device, stream);
    return RayOutputs{nullptr, nullptr, r.times.data()};
  };
  r.offsets = trace(kOp, grid, c.in, options(RayMode::Segments, max_segments, eps), allocate, stream);
  return r;
}

RaySamples uniform_ray_samples(const GridBatch& grid, const JaggedTensor& origins,
                               const JaggedTensor& directions, const JaggedTensor& t_min,
                               const JaggedTensor& t_max, double step_size, double cone_angle,
                               bool include_end_segments, bool return_midpoints, double eps,
                               Stream stream) {
  constexpr const char* kOp = "uniform_ray_samples";
  const Checked c = check_rays(kOp, grid, origins, directions, "max_voxels", 1, eps);
  check_per_ray(kOp, "t_min", t_min, c, grid);
  check_per_ray(kOp, "t_max", t_max, c, grid);
  TG_CHECK_VALUE(std::isfinite(step_size) && step_size > 0, kOp,
                 ": step_size must be finite and > 0, got ", step_size);
  TG_CHECK_VALUE(std::isfinite(cone_angle) && cone_angle >= 0, kOp,
                 ": cone_angle must be finite and >= 0, got ", cone_angle);
  RayOptions opt = options(RayMode::Samples, INT64_MAX, eps);
  opt.t_min = t_min.jdata().data();
  opt.t_max = t_max.jdata().data();
  opt.step = step_size;
  opt.cone = cone_angle;
  opt.include_end = include_end_segments;
  opt.midpoints = return_midpoints;
  RaySamples r;
  auto allocate = [&](int64_t samples) {
    r.times = return_midpoints ? Tensor::empty({samples}, c.dtype, grid.device(), stream)
                               : Tensor::empty({samples, 2}, c.dtype, grid.device(), stream);
    return RayOutputs{nullptr, nullptr, r.times.data()};
  };
  r.offsets = trace(kOp, grid, c.in, opt, allocate, stream);
  return r;
}

Tensor ray_implicit_intersection(const GridBatch& grid, const JaggedTensor& origins,
                                 const JaggedTensor& directions, const TensorView& grid_scalars,
                                 double eps, Stream stream) {
  constexpr const char* kOp = "ray_implicit_intersection";
  const Checked c = check_rays(kOp, grid, origins, directions, "max_voxels", 1, eps);
  check_dtype(kOp, "grid_scalars", grid_scalars, {c.dtype});
  check_shape(kOp, "grid_scalars", grid_scalars, {grid.total_voxels()});
  check_contiguous(kOp, "grid_scalars", grid_scalars);
  TG_CHECK_VALUE(grid_scalars.device == grid.device(), kOp,
                 ": grid_scalars must be on the grid's device (", grid.device(), "), got ",
                 grid_scalars.device);
  RayOptions opt = options(RayMode::Implicit, 1, eps);
  opt.scalars = grid_scalars.data;
  Tensor times;
  auto allocate = [&](int64_t rows) {
    times = Tensor::empty({rows}, c.dtype, grid.device(), stream);
    return RayOutputs{nullptr, nullptr, times.data()};
  };
  trace(kOp, grid, c.in, opt, allocate, stream);
  return times;
}

}  // namespace tilegrid::grid
