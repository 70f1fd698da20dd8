#pragma once
// World <-> voxel coordinates of one grid: voxel (i, j, k) has its centre at
// origin + voxel_size * (i, j, k), as in fVDB. Host/device code.
#include <cmath>

#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/index_tree.h"

namespace tilegrid::grid {

struct VoxelTransform {
  double voxel_size[3];
  double origin[3];

  // Continuous voxel coordinates of a world point (integers at voxel centres).
  TG_HOST_DEVICE void world_to_voxel(const double p[3], double u[3]) const {
    for (int a = 0; a < 3; ++a) u[a] = (p[a] - origin[a]) / voxel_size[a];
  }
  TG_HOST_DEVICE void voxel_to_world(const double u[3], double p[3]) const {
    for (int a = 0; a < 3; ++a) p[a] = origin[a] + voxel_size[a] * u[a];
  }
};

}  // namespace tilegrid::grid
