#pragma once
// Marching one ray through one grid's index tree (internal; host and device code, so the CPU
// reference and the CUDA kernels run the same arithmetic and give the same voxels and times).
//
// Space: w = (world - origin) / voxel_size + 0.5, in which voxel (i, j, k) is the unit cube
// [i, i+1) x [j, j+1) x [k, k+1) and a leaf of origin o the cube [o, o+8)^3. A ray is
// w(t) = w0 + t d with d = direction / voxel_size, so t is the world parameter of
// origin + t * direction (a multiple of the direction's length, as fVDB reports it).
//
// The march is hierarchical in three levels: a DDA over 128^3 lower-node cells between the
// ray's entry into and exit from the grid's bounding box (of its leaves); inside each lower
// node that exists a DDA over its 8^3 leaf cells, found from the node's child mask (no lookup
// from the root); inside each leaf that exists a DDA over its voxels. An empty 128^3 cell
// costs one step and one lookup; the upper (4096^3) level is not skipped. Every boundary time
// is computed from absolute cell coordinates (a 128-boundary is also an 8- and a 1-boundary,
// the same double), so nesting does not change the times. Arithmetic in double.
#include <cmath>
#include <cstdint>

#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/index_tree.h"

namespace tilegrid::grid {

struct Box3 {
  double lo[3], hi[3];  // in w space; empty when lo > hi on an axis
};

// [t_enter, t_exit] of the ray inside box, clipped to t >= 0; false when it misses.
TG_HOST_DEVICE bool clip_to_box(const double w0[3], const double d[3], const Box3& box,
                                double& t_enter, double& t_exit) {
  t_enter = 0.0;
  t_exit = INFINITY;
  for (int a = 0; a < 3; ++a) {
    if (box.lo[a] > box.hi[a]) return false;
    if (d[a] == 0.0) {
      if (w0[a] < box.lo[a] || w0[a] >= box.hi[a]) return false;
      continue;
    }
    // The same formula as dda's boundaries, so the box's faces get the same t as the cells'.
    const double inv_d = 1.0 / d[a];
    double t0 = (box.lo[a] - w0[a]) * inv_d, t1 = (box.hi[a] - w0[a]) * inv_d;
    if (t0 > t1) {
      const double s = t0;
      t0 = t1;
      t1 = s;
    }
    t_enter = t0 > t_enter ? t0 : t_enter;
    t_exit = t1 < t_exit ? t1 : t_exit;
  }
  return t_enter < t_exit;
}

// Calls visit(cell, t0, t1) for the cells of size 2^shift (in w space) that the ray crosses
// between t_begin and t_end, in order, until visit returns false. A cell is named by its
// integer coordinates (w / 2^shift, floored); at a boundary the cell the ray moves into is
// taken. Returns false if visit stopped it.
template <class Visit>
TG_HOST_DEVICE bool dda(const double w0[3], const double d[3], double t_begin, double t_end,
                        int shift, Visit&& visit) {
  const double size = double(int64_t(1) << shift);
  int64_t cell[3];
  // Each axis's next boundary in w (an integer multiple of size, exact in double) and the t
  // where the ray reaches it, (boundary - w0) * (1 / d): computed afresh at every step rather
  // than accumulated, so that a boundary has the same t at every level of the march and one
  // voxel's exit is bit for bit the next one's entry across leaf and node boundaries.
  double boundary[3], t_next[3], inv_d[3];
  int step[3];
  const double tm = t_begin;
  for (int a = 0; a < 3; ++a) {
    const double x = (w0[a] + tm * d[a]) / size;
    inv_d[a] = d[a] != 0 ? 1.0 / d[a] : 0.0;
    if (d[a] > 0) {
      cell[a] = int64_t(std::floor(x));
      step[a] = 1;
      boundary[a] = (double(cell[a]) + 1.0) * size;
    } else if (d[a] < 0) {
      cell[a] = int64_t(std::ceil(x)) - 1;
      step[a] = -1;
      boundary[a] = double(cell[a]) * size;
    } else {
      cell[a] = int64_t(std::floor(x));
      step[a] = 0;
      boundary[a] = 0;
    }
    t_next[a] = d[a] != 0 ? (boundary[a] - w0[a]) * inv_d[a] : INFINITY;
  }
  // At most the cells the segment spans per axis, plus a few: a ray so far from the grid that
  // t no longer changes in double (the next boundary's t equal to this one's) stops instead of
  // looping.
  double span = 3;
  for (int a = 0; a < 3; ++a)
    if (d[a] != 0) span += (d[a] > 0 ? d[a] : -d[a]) * (t_end - t_begin) / size + 1;
  const int64_t max_steps = span < 1e15 ? int64_t(span) : int64_t(1e15);
  double t = t_begin;
  for (int64_t steps = 0; t < t_end && steps < max_steps; ++steps) {
    int axis = t_next[0] < t_next[1] ? 0 : 1;
    axis = t_next[2] < t_next[axis] ? 2 : axis;
    const double t_exit = t_next[axis] < t_end ? t_next[axis] : t_end;
    if (!visit(cell, t, t_exit)) return false;
    t = t_exit;
    cell[axis] += step[axis];
    boundary[axis] += step[axis] * size;
    t_next[axis] = (boundary[axis] - w0[axis]) * inv_d[axis];
  }
  return true;
}

// Calls hit(row, ijk, t0, t1) for every active voxel of grid b the ray crosses, in order,
// with t1 - t0 > eps, until hit returns false. box: the grid's leaves' bounding box in w.
template <class Hit>
TG_HOST_DEVICE void march_voxels(const TreeView& tree, int64_t b, const Box3& box,
                                 const double w0[3], const double d[3], double eps, Hit&& hit) {
  for (int a = 0; a < 3; ++a)
    if (!std::isfinite(w0[a]) || !std::isfinite(d[a])) return;  // NaN/inf rays cross nothing
  double t_enter, t_exit;
  if (!clip_to_box(w0, d, box, t_enter, t_exit)) return;
  constexpr int64_t kLowerSide = int64_t(1) << kUpperShift;  // a lower node spans 128 voxels
  dda(w0, d, t_enter, t_exit, kUpperShift, [&](const int64_t* lower_cell, double r0, double r1) {
    const Coord lower_origin{int32_t(lower_cell[0] * kLowerSide), int32_t(lower_cell[1] * kLowerSide),
                             int32_t(lower_cell[2] * kLowerSide)};
    const LowerNode* lower = tree.lower_of(b, lower_origin);
    if (lower == nullptr) return true;
    return dda(w0, d, r0, r1, kLeafLog2, [&](const int64_t* leaf_cell, double t0, double t1) {
      // As for voxels below: a start rounded across the lower node's boundary names a leaf
      // cell outside it for a sliver; the next step is inside.
      for (int a = 0; a < 3; ++a)
        if (leaf_cell[a] * 8 < lower_cell[a] * kLowerSide || leaf_cell[a] * 8 >= (lower_cell[a] + 1) * kLowerSide)
          return true;
      const Coord leaf_origin{int32_t(leaf_cell[0] * 8), int32_t(leaf_cell[1] * 8),
                              int32_t(leaf_cell[2] * 8)};
      const LeafNode* leaf = tree.leaf_in(lower, leaf_origin);
      if (leaf == nullptr) return true;
      return dda(w0, d, t0, t1, 0, [&](const int64_t* v, double s0, double s1) {
        if (!(s1 - s0 > eps)) return true;
        // A start rounded onto the neighbouring leaf's side of the boundary names a voxel
        // outside this leaf for a sliver of ~1e-12; the next step is inside.
        for (int a = 0; a < 3; ++a)
          if (v[a] < leaf_cell[a] * 8 || v[a] >= leaf_cell[a] * 8 + 8) return true;
        const Coord c{int32_t(v[0]), int32_t(v[1]), int32_t(v[2])};
        const uint32_t n = child_position(c, 0, kLeafLog2);
        if (!leaf->voxels.test(n)) return true;
        return hit(leaf->first_voxel + leaf->voxels.rank(n), c, s0, s1);
      });
    });
  });
}

}  // namespace tilegrid::grid
