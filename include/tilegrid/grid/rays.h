#pragma once
// Rays through a GridBatch (fVDB's voxels_along_rays / segments_along_rays): for each ray, the
// active voxels it crosses, in order, with the ray parameters where it enters and leaves each
// one; or the segments of consecutive active voxels. Ray n of tensor b of the JaggedTensors
// runs through grid b; origin + t * direction in world space, t >= 0 (t in multiples of the
// direction's length, which need not be 1). A voxel is the box of one voxel size around its
// centre; a crossing shorter than eps (in t) is left out. NaN or infinite rays cross nothing;
// a zero direction from inside an active voxel gives that voxel with times [0, inf].
//
// Origins and directions: [N, 3] float32 or float64 (one dtype), jagged over the batch's
// grids, on the grid's device. On CUDA the call waits for `stream` once, to size the outputs.
// Sums and steps in float64 on both back ends (the same arithmetic: src/grid/render/ray_march.h).
#include <cstdint>

#include "tilegrid/core/jagged_tensor.h"
#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

struct RayVoxels {
  Tensor offsets;  // int64 [N + 1]: ray n's voxels are rows offsets[n] .. offsets[n+1]
  Tensor rows;     // int64 [H]: each voxel's row in the batch's features
  Tensor ijk;      // int32 [H, 3]
  Tensor times;    // [H, 2] (the rays' dtype): t where the ray enters and leaves the voxel
};

// At most max_voxels (>= 1) voxels a ray: the first ones along it.
RayVoxels voxels_along_rays(const GridBatch& grid, const JaggedTensor& origins,
                            const JaggedTensor& directions, int64_t max_voxels, double eps = 0.0,
                            Stream stream = {});

struct RaySegments {
  Tensor offsets;  // int64 [N + 1]
  Tensor times;    // [S, 2]: t where each run of consecutive active voxels starts and ends
};

// At most max_segments (>= 1) segments a ray.
RaySegments segments_along_rays(const GridBatch& grid, const JaggedTensor& origins,
                                const JaggedTensor& directions, int64_t max_segments,
                                double eps = 0.0, Stream stream = {});

struct RaySamples {
  Tensor offsets;  // int64 [N + 1]
  Tensor times;    // [S, 2] start and end t of each sample interval, or [S] midpoints
};

// Sample intervals along each ray inside its segments of active voxels, between t_min and
// t_max ([N] each, jagged like the rays, the rays' dtype): the boundaries are t_min,
// t_min + step_size, ... (each step max(step_size, t * cone_angle)); an interval inside a
// segment is kept whole, one that crosses a segment's end keeps its part inside the segment
// when include_end_segments. Intervals no longer than eps are left out.
RaySamples uniform_ray_samples(const GridBatch& grid, const JaggedTensor& origins,
                               const JaggedTensor& directions, const JaggedTensor& t_min,
                               const JaggedTensor& t_max, double step_size,
                               double cone_angle = 0.0, bool include_end_segments = true,
                               bool return_midpoints = false, double eps = 0.0,
                               Stream stream = {});

// [N] (the rays' dtype): t of each ray's first zero crossing of grid_scalars ([total_voxels],
// one value a voxel), -1 where there is none. fVDB's rule finds it: along the active voxels the
// ray crosses, the first with a signed value (not 0, not NaN) sets the sign, and the first later
// one of the other sign ends the search. Between two touching voxels it is placed on the
// trilinear field between voxel centres where that is defined and changes sign there (to 1e-12
// relative; exact for a linear field), else where the line through the two values crosses
// zero; after a gap of inactive or unsigned voxels, at the second voxel's entry.
Tensor ray_implicit_intersection(const GridBatch& grid, const JaggedTensor& origins,
                                 const JaggedTensor& directions, const TensorView& grid_scalars,
                                 double eps = 0.0, Stream stream = {});

}  // namespace tilegrid::grid
