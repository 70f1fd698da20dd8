#pragma once
// Whether a triangle overlaps an axis-aligned cube, by the separating axis theorem: the two
// convex shapes are disjoint exactly when their projections are disjoint on one of 13 axes
// (the cube's 3 face normals, the triangle's normal, and the 9 cross products of cube and
// triangle edges). Host/device code; coordinates relative to the cube's centre.
#include <cmath>

#include "tilegrid/core/host_device.h"

namespace tilegrid::grid {

namespace sat {
TG_HOST_DEVICE double dot3(const double a[3], const double b[3]) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}
TG_HOST_DEVICE void cross3(const double a[3], const double b[3], double out[3]) {
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}
// Separated on `axis` if the triangle's projection misses [-r, r], r the cube's radius there.
TG_HOST_DEVICE bool separated_on(const double axis[3], const double* const v[3], double half) {
  const double p0 = dot3(axis, v[0]), p1 = dot3(axis, v[1]), p2 = dot3(axis, v[2]);
  const double lo = ::fmin(p0, ::fmin(p1, p2)), hi = ::fmax(p0, ::fmax(p1, p2));
  const double r = half * (::fabs(axis[0]) + ::fabs(axis[1]) + ::fabs(axis[2]));
  return lo > r || hi < -r;
}
}  // namespace sat

// a, b, c: the triangle's vertices minus the cube's centre; half: the cube's half edge.
TG_HOST_DEVICE bool triangle_overlaps_cube(const double a[3], const double b[3], const double c[3],
                                           double half) {
  const double* const v[3] = {a, b, c};
  for (int axis = 0; axis < 3; ++axis) {  // the cube's face normals
    const double lo = ::fmin(a[axis], ::fmin(b[axis], c[axis]));
    const double hi = ::fmax(a[axis], ::fmax(b[axis], c[axis]));
    if (lo > half || hi < -half) return false;
  }
  double edges[3][3];
  for (int e = 0; e < 3; ++e)
    for (int d = 0; d < 3; ++d) edges[e][d] = v[(e + 1) % 3][d] - v[e][d];
  double normal[3];
  sat::cross3(edges[0], edges[1], normal);
  if (sat::separated_on(normal, v, half)) return false;
  for (int e = 0; e < 3; ++e)
    for (int d = 0; d < 3; ++d) {
      const double unit[3] = {d == 0 ? 1.0 : 0.0, d == 1 ? 1.0 : 0.0, d == 2 ? 1.0 : 0.0};
      double axis[3];
      sat::cross3(unit, edges[e], axis);
      if (sat::separated_on(axis, v, half)) return false;
    }
  return true;
}

}  // namespace tilegrid::grid
