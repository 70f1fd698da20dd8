// integrate_tsdf: argument checks, the CPU loop (one voxel a task, on every core) and dispatch
// to the CUDA kernel; both run tsdf_voxel.h.
#include "tilegrid/grid/tsdf.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/parallel_for.h"
#include "grid/tsdf/tsdf_voxel.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/error.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/tsdf/tsdf_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

constexpr const char* kOp = "integrate_tsdf";

void check_on(const char* name, const TensorView& t, Device device) {
  check_contiguous(kOp, name, t);
  TG_CHECK_VALUE(t.device == device, kOp, ": ", name, " must be on the grid's device (", device,
                 "), got ", t.device);
}

}  // namespace

void integrate_tsdf(const GridBatch& grid, double truncation, const TsdfImages& images,
                    const TensorView& tsdf, const TensorView& weights, Stream stream) {
  const int64_t B = grid.num_grids(), N = grid.total_voxels();
  const Device dev = grid.device();
  TG_CHECK_VALUE(std::isfinite(truncation) && truncation > 0, kOp,
                 ": truncation_distance must be finite and > 0, got ", truncation);
  check_dtype(kOp, "intrinsics", images.intrinsics, {DType::Float64});
  check_shape(kOp, "intrinsics", images.intrinsics, {B, 3, 3});
  check_on("intrinsics", images.intrinsics, dev);
  check_dtype(kOp, "world_to_camera", images.world_to_camera, {DType::Float64});
  check_shape(kOp, "world_to_camera", images.world_to_camera, {B, 4, 4});
  check_on("world_to_camera", images.world_to_camera, dev);
  check_dtype(kOp, "depth_images", images.depths, {DType::Float32, DType::Float64});
  check_ndim(kOp, "depth_images", images.depths, 3);
  const DType dt = images.depths.dtype;
  const int64_t H = images.depths.size(1), W = images.depths.size(2);
  check_shape(kOp, "depth_images", images.depths, {B, H, W});
  check_on("depth_images", images.depths, dev);
  if (images.weights) {
    check_dtype(kOp, "weight_images", *images.weights, {dt});
    check_shape(kOp, "weight_images", *images.weights, {B, H, W});
    check_on("weight_images", *images.weights, dev);
  }
  check_dtype(kOp, "tsdf", tsdf, {dt});
  check_shape(kOp, "tsdf", tsdf, {N});
  check_on("tsdf", tsdf, dev);
  check_dtype(kOp, "weights", weights, {dt});
  check_shape(kOp, "weights", weights, {N});
  check_on("weights", weights, dev);
  if (N == 0) return;
  const JaggedTensor ijk = grid.ijk(stream);
  const TsdfInputs in{ijk.jdata().view().data_ptr<const int32_t>(),
                      grid.voxel_offsets().view().data_ptr<const int64_t>(),
                      B,
                      grid.transforms(),
                      images.intrinsics.data_ptr<const double>(),
                      images.world_to_camera.data_ptr<const double>(),
                      images.depths.data,
                      images.weights ? images.weights->data : nullptr,
                      H,
                      W,
                      truncation,
                      dt == DType::Float64,
                      tsdf.data,
                      weights.data};
  if (dev.is_cuda()) {
#ifdef TILEGRID_WITH_CUDA
    cuda::integrate_tsdf(in, N, dev.index, stream);
    return;
#else
    throw Error("integrate_tsdf: tilegrid was built without CUDA");
#endif
  }
  parallel_for(N, [&](int64_t r) { integrate_tsdf_voxel(in, r); });
}

}  // namespace tilegrid::grid
