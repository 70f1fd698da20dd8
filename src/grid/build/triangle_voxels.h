#pragma once
// The voxels one triangle touches, shared by the CPU and CUDA builds of GridBatch.from_mesh so
// that both visit the same candidates with the same arithmetic (host/device code).
#include <cmath>
#include <cstdint>

#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/transform.h"
#include "tilegrid/grid/triangle_box.h"

namespace tilegrid::grid {

// A triangle in continuous voxel coordinates (integers at voxel centres) and the inclusive
// box of voxels whose unit cubes its bounding box reaches.
struct VoxelTriangle {
  double v[3][3];
  int64_t lo[3], hi[3];
};

// x - x is 0 for finite x and NaN for NaN or infinities; the same spelling on host and device.
TG_HOST_DEVICE bool is_finite(double x) { return x - x == 0.0; }

// world: the three vertices, xyz each. False when a vertex is not finite.
TG_HOST_DEVICE bool to_voxel_triangle(const VoxelTransform& transform,
                                             const double world[3][3], VoxelTriangle& tri) {
  for (int corner = 0; corner < 3; ++corner) {
    for (int a = 0; a < 3; ++a)
      if (!is_finite(world[corner][a])) return false;
    transform.world_to_voxel(world[corner], tri.v[corner]);
  }
  for (int a = 0; a < 3; ++a) {
    const double lo = ::fmin(tri.v[0][a], ::fmin(tri.v[1][a], tri.v[2][a]));
    const double hi = ::fmax(tri.v[0][a], ::fmax(tri.v[1][a], tri.v[2][a]));
    // Voxel i covers [i - 0.5, i + 0.5]: a cube touched only on its face still counts.
    tri.lo[a] = int64_t(::floor(lo + 0.5));
    tri.hi[a] = int64_t(::ceil(hi - 0.5));
  }
  return true;
}

// Whether every candidate voxel of tri has an int32 coordinate.
TG_HOST_DEVICE bool in_int32_range(const VoxelTriangle& tri) {
  for (int a = 0; a < 3; ++a)
    if (tri.lo[a] < INT32_MIN || tri.hi[a] > INT32_MAX) return false;
  return true;
}

// Calls visit(i, j, k) for each voxel whose cube the triangle overlaps, in i, j, k order.
template <class Visit>
TG_HOST_DEVICE void for_each_touched_voxel(const VoxelTriangle& tri, Visit&& visit) {
  for (int64_t i = tri.lo[0]; i <= tri.hi[0]; ++i)
    for (int64_t j = tri.lo[1]; j <= tri.hi[1]; ++j)
      for (int64_t k = tri.lo[2]; k <= tri.hi[2]; ++k) {
        const double centre[3] = {double(i), double(j), double(k)};
        double rel[3][3];
        for (int corner = 0; corner < 3; ++corner)
          for (int a = 0; a < 3; ++a) rel[corner][a] = tri.v[corner][a] - centre[a];
        if (triangle_overlaps_cube(rel[0], rel[1], rel[2], 0.5))
          visit(int32_t(i), int32_t(j), int32_t(k));
      }
}

}  // namespace tilegrid::grid
