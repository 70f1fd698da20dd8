#pragma once
// Trilinear interpolation weights over the 8 voxels around a point (host/device code): the
// point at continuous voxel coordinates u lies in the cell with corner c = floor(u); corner
// n (bits 2, 1, 0 = offsets along i, j, k) has weight prod_a (o_a ? f_a : 1 - f_a) with
// f = u - c. Voxels that are not active contribute nothing, as in fVDB.
#include <cmath>
#include <cstdint>

#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/index_tree.h"

namespace tilegrid::grid {

struct TrilinearCell {
  Coord corner;
  double frac[3];
  // False where the cell's corners leave int32 coordinates (a point at 1e30, or NaN): no
  // voxel of any grid is there, so the point reads and writes nothing. (Converted to int32
  // unchecked, such a corner wrapped onto a voxel at -2^31.)
  bool in_range;

  TG_HOST_DEVICE static TrilinearCell at(const double u[3]) {
    TrilinearCell c;
    c.in_range = true;
    for (int a = 0; a < 3; ++a)  // corner and corner + 1 both in int32; NaN fails the test
      c.in_range = c.in_range && u[a] >= -2147483648.0 && u[a] < 2147483647.0;
    const double fl[3] = {c.in_range ? ::floor(u[0]) : 0.0, c.in_range ? ::floor(u[1]) : 0.0,
                          c.in_range ? ::floor(u[2]) : 0.0};
    c.corner = {int32_t(fl[0]), int32_t(fl[1]), int32_t(fl[2])};
    for (int a = 0; a < 3; ++a) c.frac[a] = c.in_range ? u[a] - fl[a] : 0.0;
    return c;
  }

  TG_HOST_DEVICE Coord voxel(int n) const {
    return {corner.i + ((n >> 2) & 1), corner.j + ((n >> 1) & 1), corner.k + (n & 1)};
  }

  TG_HOST_DEVICE double weight(int n) const {
    double w = 1;
    for (int a = 0; a < 3; ++a) w *= ((n >> (2 - a)) & 1) ? frac[a] : 1 - frac[a];
    return w;
  }

  // d weight(n) / d u_a.
  TG_HOST_DEVICE double weight_gradient(int n, int a) const {
    double g = ((n >> (2 - a)) & 1) ? 1 : -1;
    for (int b = 0; b < 3; ++b)
      if (b != a) g *= ((n >> (2 - b)) & 1) ? frac[b] : 1 - frac[b];
    return g;
  }
};

}  // namespace tilegrid::grid
