#pragma once
// One voxel's TSDF update (internal): the code the CPU loop and the CUDA kernel both run
// (tilegrid/grid/tsdf.h states the rule).
#include <cmath>
#include <cstdint>

#include "grid/batch_access.h"
#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/transform.h"

namespace tilegrid::grid {

struct TsdfInputs {
  const int32_t* ijk;                // [N, 3] in feature-row order
  const int64_t* voxel_offsets;      // [B + 1]
  int64_t num_grids;
  const VoxelTransform* transforms;  // [B]
  const double* intrinsics;          // [B, 3, 3]
  const double* world_to_camera;     // [B, 4, 4]
  const void* depths;                // [B, H, W]
  const void* pixel_weights;         // [B, H, W] or nullptr
  int64_t height, width;
  double truncation;
  bool float64;
  void* tsdf;     // [N]
  void* weights;  // [N]
};

TG_HOST_DEVICE void integrate_tsdf_voxel(const TsdfInputs& in, int64_t row) {
  const int64_t b = group_of(in.voxel_offsets, in.num_grids, row);
  const double ijk[3] = {double(in.ijk[3 * row]), double(in.ijk[3 * row + 1]),
                         double(in.ijk[3 * row + 2])};
  double p[3];
  in.transforms[b].voxel_to_world(ijk, p);
  const double* m = in.world_to_camera + 16 * b;
  double c[3];
  for (int a = 0; a < 3; ++a) c[a] = m[4 * a] * p[0] + m[4 * a + 1] * p[1] + m[4 * a + 2] * p[2] + m[4 * a + 3];
  if (!(c[2] > 0)) return;
  const double* K = in.intrinsics + 9 * b;
  const double u = K[0] * c[0] / c[2] + K[1] * c[1] / c[2] + K[2];
  const double v = K[4] * c[1] / c[2] + K[5];
  if (!(u >= 0 && v >= 0 && u < double(in.width) && v < double(in.height))) return;
  const int64_t pixel = (b * in.height + int64_t(v)) * in.width + int64_t(u);
  const double depth = load_real(in.depths, in.float64, pixel);
  if (!(depth > 0) || !std::isfinite(depth)) return;
  const double sdf = depth - c[2];
  if (sdf < -in.truncation) return;
  const double w_obs = in.pixel_weights ? load_real(in.pixel_weights, in.float64, pixel) : 1.0;
  if (!(w_obs > 0)) return;
  const double w = load_real(in.weights, in.float64, row);
  const double t = load_real(in.tsdf, in.float64, row);
  const double obs = sdf < in.truncation ? sdf : in.truncation;
  store_real(in.tsdf, in.float64, row, (w * t + w_obs * obs) / (w + w_obs));
  store_real(in.weights, in.float64, row, w + w_obs);
}

}  // namespace tilegrid::grid
