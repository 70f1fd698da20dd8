#pragma once
// TSDF fusion (fVDB's integrate_tsdf, the per-voxel half): each voxel of grid b takes depth
// image b's projective signed distance at its centre into a running weighted average
// (Curless & Levoy 1996, as KinectFusion and Open3D do):
//   x_c = world_to_camera[b] * centre;  (u, v) = (fx x/z + cx, fy y/z + cy)
//   pixel (row floor(v), column floor(u)) -- pixel (r, c) covers [c, c+1) x [r, r+1), its
//   centre at (c + 0.5, r + 0.5);  d = depth there (z along the optical axis, 0 = no measurement)
//   sdf = d - z;  voxels with z <= 0, off the image, d <= 0 or not finite, or sdf < -truncation
//   (occluded) keep their values;  otherwise, with w_obs the pixel's weight (1 without a weight
//   image; 0 leaves the voxel as it is):
//   tsdf <- (w tsdf + w_obs min(sdf, truncation)) / (w + w_obs),  w <- w + w_obs.
// The TSDF is in world units (clamped to [-truncation, truncation]). Growing the grid to the
// band around the measured surface is the caller's (python/tilegrid/grid/tsdf.py does it with
// from_points and from_ijk). float32 or float64 depths, tsdf and weights (one dtype for all);
// computed in double; CPU or GPU (the same code).
#include <optional>

#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

struct TsdfImages {
  TensorView intrinsics;       // float64 [B, 3, 3]: fx, 0, cx / 0, fy, cy / 0, 0, 1
  TensorView world_to_camera;  // float64 [B, 4, 4]: rigid (rotation, translation; last row 0 0 0 1)
  TensorView depths;           // [B, H, W]
  std::optional<TensorView> weights;  // [B, H, W], >= 0, or none (every pixel 1)
};

// Updates tsdf and weights ([total_voxels], contiguous, on the grid's device) in place.
void integrate_tsdf(const GridBatch& grid, double truncation, const TsdfImages& images,
                    const TensorView& tsdf, const TensorView& weights, Stream stream = {});

}  // namespace tilegrid::grid
