#pragma once
// One ray's voxels or segments (internal; host and device): where the ray lies in the inputs,
// which grid it runs through, and the march of ray_march.h turned into output rows. The CPU
// loop and the CUDA kernels call trace_ray twice: once to count (outputs null), once to write
// at the ray's offset.
#include <cstdint>

#include "tilegrid/core/dtype.h"
#include "tilegrid/core/host_device.h"
#include "grid/ray_march.h"
#include "tilegrid/grid/transform.h"

namespace tilegrid::grid {

struct RayInputs {
  const void* origins;      // [n, 3]
  const void* directions;   // [n, 3]
  bool float64;             // else float32
  const int64_t* joffsets;  // [num_grids + 1]
  int64_t num_grids, num_rays;
};

struct RayOutputs {
  int64_t* rows = nullptr;  // voxels mode: [H]
  int32_t* ijk = nullptr;   // voxels mode: [H, 3]
  void* times = nullptr;    // [H or S, 2], the rays' dtype
};

// Leaf bounding boxes per grid in w space (ray_march.h), as int32 lo[3], hi[3]: lo starts at
// INT32_MAX and hi at INT32_MIN, so an empty grid's box is empty.
struct GridBoxes {
  const int32_t* boxes;  // [num_grids, 6]
  TG_HOST_DEVICE Box3 box(int64_t b) const {
    Box3 r;
    for (int a = 0; a < 3; ++a) {
      r.lo[a] = double(boxes[6 * b + a]);
      r.hi[a] = double(boxes[6 * b + 3 + a]);
    }
    return r;
  }
};

// Grid of ray n: the b with joffsets[b] <= n < joffsets[b + 1].
TG_HOST_DEVICE int64_t grid_of_ray(const RayInputs& in, int64_t n) {
  int64_t lo = 0, hi = in.num_grids;  // joffsets[lo] <= n < joffsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (in.joffsets[mid] <= n)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

TG_HOST_DEVICE double ray_component(const void* data, bool float64, int64_t i) {
  return float64 ? static_cast<const double*>(data)[i] : double(static_cast<const float*>(data)[i]);
}

TG_HOST_DEVICE void store_times(void* times, bool float64, int64_t row, double t0, double t1) {
  if (float64) {
    static_cast<double*>(times)[2 * row] = t0;
    static_cast<double*>(times)[2 * row + 1] = t1;
  } else {
    static_cast<float*>(times)[2 * row] = float(t0);
    static_cast<float*>(times)[2 * row + 1] = float(t1);
  }
}

// Traces ray n; writes its rows from `first` on when out.times is set; returns how many
// (at most max_out). segments: runs of voxels whose crossings touch (one's exit t is exactly
// the next one's entry t) are merged into one [t0, t1].
TG_HOST_DEVICE int64_t trace_ray(const TreeView& tree, const VoxelTransform* transforms,
                                 const GridBoxes& boxes, const RayInputs& in, int64_t n,
                                 int64_t max_out, double eps, bool segments, int64_t first,
                                 const RayOutputs& out) {
  const int64_t b = grid_of_ray(in, n);
  const VoxelTransform& tf = transforms[b];
  double w0[3], d[3];
  for (int a = 0; a < 3; ++a) {
    w0[a] = (ray_component(in.origins, in.float64, 3 * n + a) - tf.origin[a]) / tf.voxel_size[a] +
            0.5;
    d[a] = ray_component(in.directions, in.float64, 3 * n + a) / tf.voxel_size[a];
  }
  int64_t count = 0;
  double seg0 = 0, seg1 = -1;  // the open segment; none while seg1 < seg0
  march_voxels(tree, b, boxes.box(b), w0, d, eps,
               [&](int64_t row, Coord c, double t0, double t1) {
                 if (segments) {
                   if (seg1 >= seg0 && t0 == seg1) {  // extends the open segment
                     seg1 = t1;
                     return true;
                   }
                   if (seg1 >= seg0) {  // closes it
                     if (out.times != nullptr) store_times(out.times, in.float64, first + count, seg0, seg1);
                     if (++count == max_out) return false;
                   }
                   seg0 = t0;
                   seg1 = t1;
                   return true;
                 }
                 if (out.times != nullptr) {
                   out.rows[first + count] = row;
                   out.ijk[3 * (first + count)] = c.i;
                   out.ijk[3 * (first + count) + 1] = c.j;
                   out.ijk[3 * (first + count) + 2] = c.k;
                   store_times(out.times, in.float64, first + count, t0, t1);
                 }
                 return ++count < max_out;
               });
  if (segments && seg1 >= seg0 && count < max_out) {
    if (out.times != nullptr) store_times(out.times, in.float64, first + count, seg0, seg1);
    ++count;
  }
  return count;
}

// Folds leaf l into its grid's box (the grid found from the leaf's first row).
TG_HOST_DEVICE int64_t grid_of_row(const int64_t* voxel_offsets, int64_t num_grids, int64_t row) {
  int64_t lo = 0, hi = num_grids;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (voxel_offsets[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace tilegrid::grid
