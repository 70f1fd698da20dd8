#pragma once
// One ray's voxels or segments (internal; host and device): where the ray lies in the inputs,
// which grid it runs through, and the march of ray_march.h turned into output rows. The CPU
// loop and the CUDA kernels call trace_ray twice: once to count (outputs null), once to write
// at the ray's offset.
#include <cmath>
#include <cstdint>

#include "grid/batch_access.h"
#include "grid/render/ray_march.h"
#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/transform.h"
#include "tilegrid/grid/trilinear.h"

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
  return group_of(in.joffsets, in.num_grids, n);
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

// What a trace produces: the voxels crossed, the runs of consecutive ones (segments), uniform
// samples inside those runs, or the first zero crossing of a per-voxel scalar field.
enum class RayMode : int { Voxels = 0, Segments = 1, Samples = 2, Implicit = 3 };

struct RayOptions {
  RayMode mode = RayMode::Voxels;
  int64_t max_out = 1;  // voxels / segments a ray
  double eps = 0;       // crossings (and samples) no longer than eps are left out
  // Samples: interval boundaries t_min, t_min + step, ... along the ray, the step growing to
  // t * cone when that is longer; an interval is kept where it lies inside a segment, and its
  // part inside one where it crosses a segment's end (include_end).
  const void* t_min = nullptr;  // [N], the rays' dtype
  const void* t_max = nullptr;
  double step = 0, cone = 0;
  bool include_end = true, midpoints = false;
  // Implicit: one scalar a voxel ([total_voxels], the rays' dtype); trace_ray says how the
  // crossing is found.
  const void* scalars = nullptr;
};

// The scalar field at w-space point w (ray_march.h), or false where a corner is inactive.
// `lookup` keeps the last leaf: a ray's samples and a cell's corners mostly share one.
TG_HOST_DEVICE bool field_at(CachedLookup& lookup, const void* scalars, bool float64,
                             const double w[3], double& value) {
  const double u[3] = {w[0] - 0.5, w[1] - 0.5, w[2] - 0.5};
  const TrilinearCell cell = TrilinearCell::at(u);
  value = 0;
  if (!cell.in_range) return false;
  for (int c = 0; c < 8; ++c) {
    const int64_t row = lookup.index_of(cell.voxel(c));
    if (row < 0) return false;
    value += cell.weight(c) * load_real(scalars, float64, row);
  }
  return true;
}

// The root of phi in [lo, hi] where phi(lo) = flo and phi(hi) = fhi have opposite signs (or
// fhi = 0), by the Illinois variant of regula falsi: one step where phi is linear along the
// ray (a plane: the step lands within rounding of the root, and a value within 1e-13 of the
// ends' is taken as zero), superlinear on the cubic that trilinear interpolation gives along a
// ray inside a cell (where bisection took about 40 steps to a 1e-12 relative width).
template <typename Phi>
TG_HOST_DEVICE double bracketed_root(Phi& phi, double lo, double flo, double hi, double fhi) {
  if (fhi == 0) return hi;
  int side = 0;  // which end the last two steps kept (Illinois halves its value)
  for (int it = 0; it < 60 && hi - lo > 1e-12 * (1 + hi); ++it) {
    double t = hi - fhi * (hi - lo) / (fhi - flo);
    if (!(t > lo && t < hi)) t = 0.5 * (lo + hi);  // rounding at the ends: bisect
    double ft;
    if (!phi(t, ft)) return 0.5 * (lo + hi);
    // Within rounding of zero (the one step a plane takes): its sign means nothing any more,
    // and following it would only stall the bracket.
    if (fabs(ft) <= 1e-13 * (fabs(flo) + fabs(fhi))) return t;
    if ((ft > 0) == (fhi > 0)) {
      hi = t;
      fhi = ft;
      if (side == -1) flo *= 0.5;
      side = -1;
    } else {
      lo = t;
      flo = ft;
      if (side == 1) fhi *= 0.5;
      side = 1;
    }
  }
  return 0.5 * (lo + hi);
}

// How many voxel crossings before and after the bracketing pair locate_crossing searches as
// well: the trilinear field can change sign a voxel or more before or after the voxel values
// do (a ray at a shallow angle to the surface passes voxels whose centres lie on the other
// side of it).
constexpr int kCrossingLookback = 4;
constexpr int kCrossingLookahead = 4;

// The crossing near the end of a run of touching voxel crossings along a ray, whose voxel
// values changed sign from `positive`'s side: boundaries bounds[0] < ... < bounds[count] (each
// voxel's entry, then the last one's exit). The trilinear field between voxel centres
// (field_at) is read at each voxel's entry and midpoint and at the exit; the first pair of
// neighbouring points where it is defined and goes from the reference side to the other holds
// the root (bracketed_root: exact for a linear field). Where there is none (a corner inactive,
// or the interpolated field changing sign outside the window), `fallback`.
TG_HOST_DEVICE double locate_crossing(const TreeView& tree, int64_t b, const RayInputs& in,
                                      const RayOptions& opt, const double w0[3],
                                      const double d[3], const double* bounds, int count,
                                      bool positive, double fallback) {
  CachedLookup lookup(tree, b);
  auto phi = [&](double t, double& v) {
    const double p[3] = {w0[0] + t * d[0], w0[1] + t * d[1], w0[2] + t * d[2]};
    return field_at(lookup, opt.scalars, in.float64, p, v);
  };
  double lo_t = bounds[0], lo_v = 0;
  bool lo_ok = phi(lo_t, lo_v);
  for (int i = 1; i <= 2 * count; ++i) {
    // The points in order: bounds[0], its voxel's midpoint, bounds[1], ..., bounds[count].
    const double hi_t = i % 2 == 0 ? bounds[i / 2] : 0.5 * (bounds[i / 2] + bounds[i / 2 + 1]);
    double hi_v;
    const bool hi_ok = phi(hi_t, hi_v);
    if (lo_ok && hi_ok && lo_v != 0 && (lo_v > 0) == positive) {
      if (hi_v == 0) return hi_t;
      if ((hi_v > 0) != positive) return bracketed_root(phi, lo_t, lo_v, hi_t, hi_v);
    }
    lo_t = hi_t;
    lo_ok = hi_ok;
    lo_v = hi_v;
  }
  return fallback;
}

// Traces ray n; writes its rows from `first` on when out.times is set; returns how many.
// Segments: runs of voxels whose crossings touch (one's exit t is exactly the next one's
// entry t) merged into one [t0, t1]. Implicit: always one row, t of the first sign change
// between the values of the active voxels crossed (locate_crossing), or -1.
TG_HOST_DEVICE int64_t trace_ray(const TreeView& tree, const VoxelTransform* transforms,
                                 const GridBoxes& boxes, const RayInputs& in, int64_t n,
                                 const RayOptions& opt, int64_t first, const RayOutputs& out) {
  const int64_t b = grid_of_ray(in, n);
  const VoxelTransform& tf = transforms[b];
  double w0[3], d[3];
  for (int a = 0; a < 3; ++a) {
    w0[a] = (load_real(in.origins, in.float64, 3 * n + a) - tf.origin[a]) / tf.voxel_size[a] +
            0.5;
    d[a] = load_real(in.directions, in.float64, 3 * n + a) / tf.voxel_size[a];
  }
  int64_t count = 0;
  const bool write = out.times != nullptr;

  if (opt.mode == RayMode::Implicit) {
    double root = -1;
    // fVDB's rule: one value a voxel, read from the march's row (no lookup); 0 and NaN carry
    // no sign. The first signed voxel sets the reference sign; the first later one of the
    // other sign brackets the crossing, which locate_crossing then places. bounds: the entries
    // of the voxels of the current run of touching crossings, up to kCrossingLookback before
    // the bracketing voxel and kCrossingLookahead after it, then the run's exit.
    bool have_reference = false, reference_positive = false;
    double bounds[kCrossingLookback + kCrossingLookahead + 3];
    int run = 0;          // entries in bounds
    int bracket = -1;     // index in bounds of the bracketing voxel, once found
    double fallback = 0;  // where the crossing is placed if locate_crossing finds none
    double last_exit = 0, last_value = 0, last_mid = 0;
    bool unsigned_between = false;  // an unsigned voxel since the last signed one
    march_voxels(tree, b, boxes.box(b), w0, d, opt.eps,
                 [&](int64_t row, Coord, double t0, double t1) {
                   const bool touching = run > 0 && t0 == last_exit;
                   if (bracket >= 0) {  // looking ahead: any active voxel, touching
                     if (!touching) return false;
                     bounds[run++] = t0;
                     last_exit = t1;
                     return run - bracket <= kCrossingLookahead;
                   }
                   const double value = load_real(opt.scalars, in.float64, row);
                   const bool is_signed = value != 0 && value == value;
                   if (!have_reference && !is_signed) return true;
                   const double mid = 0.5 * (t0 + t1);
                   if (is_signed && have_reference && (value > 0) != reference_positive) {
                     if (!touching) {
                       root = t0;  // across inactive voxels: the entry, as fVDB
                       return false;
                     }
                     // Across unsigned voxels fVDB takes the entry; between neighbours, the
                     // line through the two values.
                     fallback = unsigned_between
                                    ? t0
                                    : last_mid + (mid - last_mid) * last_value / (last_value - value);
                     bracket = run;
                     bounds[run++] = t0;
                     last_exit = t1;
                     return kCrossingLookahead > 0;
                   }
                   if (!have_reference) {
                     have_reference = true;
                     reference_positive = value > 0;
                   }
                   if (!touching) run = 0;  // a new run starts at this voxel
                   if (run == kCrossingLookback + 1) {
                     for (int i = 1; i < run; ++i) bounds[i - 1] = bounds[i];
                     --run;
                   }
                   bounds[run++] = t0;
                   last_exit = t1;
                   unsigned_between = !is_signed;
                   if (is_signed) {
                     last_value = value;
                     last_mid = mid;
                   }
                   return true;
                 });
    if (bracket >= 0) {
      bounds[run] = last_exit;
      root = locate_crossing(tree, b, in, opt, w0, d, bounds, run, reference_positive, fallback);
    }
    if (write) {
      if (in.float64)
        static_cast<double*>(out.times)[first] = root;
      else
        static_cast<float*>(out.times)[first] = float(root);
    }
    return 1;
  }

  // Samples: the running interval boundary, kept across the ray's segments.
  const double t_lo = opt.mode == RayMode::Samples ? load_real(opt.t_min, in.float64, n) : 0;
  const double t_hi = opt.mode == RayMode::Samples ? load_real(opt.t_max, in.float64, n) : 0;
  double tk = t_lo;
  int64_t k = 0;  // tk = t_lo + k * step while cone == 0 (no drift)
  auto emit = [&](double t0, double t1) {
    if (write) {
      if (opt.mode == RayMode::Samples && opt.midpoints) {
        const double m = 0.5 * (t0 + t1);
        if (in.float64)
          static_cast<double*>(out.times)[first + count] = m;
        else
          static_cast<float*>(out.times)[first + count] = float(m);
      } else {
        store_times(out.times, in.float64, first + count, t0, t1);
      }
    }
    ++count;
  };
  // Called with each closed segment; false stops the march.
  auto on_segment = [&](double s0, double s1) {
    if (opt.mode == RayMode::Segments) {
      emit(s0, s1);
      return count < opt.max_out;
    }
    const double a = s0 > t_lo ? s0 : t_lo, e = s1 < t_hi ? s1 : t_hi;
    if (!(e - a > opt.eps) || !(opt.step > 0)) return true;
    if (opt.cone <= 0) {
      const int64_t skip = int64_t(std::floor((a - t_lo) / opt.step));
      if (skip > k) k = skip;
      tk = t_lo + double(k) * opt.step;
    } else {
      // Jump over the intervals before a: linear while t * cone < step, then geometric.
      const double knee = opt.step / opt.cone;
      if (tk < knee && a > tk) {
        const double target = a < knee ? a : knee;
        const int64_t jump = int64_t(std::floor((target - tk) / opt.step)) - 1;
        if (jump > 0) tk += double(jump) * opt.step;
      }
      if (tk >= knee && a > tk && tk > 0) {
        const int64_t jump = int64_t(std::floor(std::log(a / tk) / std::log1p(opt.cone))) - 1;
        if (jump > 0) tk *= std::pow(1 + opt.cone, double(jump));
      }
    }
    while (tk < e) {
      double tn;
      if (opt.cone <= 0) {
        tn = t_lo + double(k + 1) * opt.step;
      } else {
        const double grow = tk * opt.cone;
        tn = tk + (grow > opt.step ? grow : opt.step);
      }
      if (!(tn > tk)) return true;  // a step below t's rounding: no progress possible
      const double lo = tk > a ? tk : a, hi = tn < e ? tn : e;
      const bool whole = lo == tk && hi == tn;
      if (hi - lo > opt.eps && (whole || opt.include_end)) emit(lo, hi);
      if (tn > e) break;  // the interval runs on into the next segment (or past t_max)
      tk = tn;
      ++k;
    }
    return true;
  };

  double seg0 = 0, seg1 = -1;  // the open segment; none while seg1 < seg0
  bool going = true;
  march_voxels(tree, b, boxes.box(b), w0, d, opt.eps,
               [&](int64_t row, Coord c, double t0, double t1) {
                 if (opt.mode == RayMode::Voxels) {
                   if (write) {
                     out.rows[first + count] = row;
                     out.ijk[3 * (first + count)] = c.i;
                     out.ijk[3 * (first + count) + 1] = c.j;
                     out.ijk[3 * (first + count) + 2] = c.k;
                     store_times(out.times, in.float64, first + count, t0, t1);
                   }
                   return ++count < opt.max_out;
                 }
                 if (seg1 >= seg0 && t0 == seg1) {  // extends the open segment
                   seg1 = t1;
                   return true;
                 }
                 if (seg1 >= seg0 && !(going = on_segment(seg0, seg1))) return false;
                 seg0 = t0;
                 seg1 = t1;
                 return true;
               });
  if (opt.mode != RayMode::Voxels && going && seg1 >= seg0) on_segment(seg0, seg1);
  return count;
}

// Grid of feature row `row` (voxel_offsets: [num_grids + 1]).
TG_HOST_DEVICE int64_t grid_of_row(const int64_t* voxel_offsets, int64_t num_grids, int64_t row) {
  return group_of(voxel_offsets, num_grids, row);
}

}  // namespace tilegrid::grid
