#pragma once
// Grids derived from a GridBatch (fVDB's coarsened, refined, dual, dilated and pruned grids),
// built where the batch lives. Each grid of the batch gives one grid of the result.
//
// The first four are the output grids of convolution geometries (convolution.h), so they share
// the convolution's candidate generation on the CPU and the GPU:
//   coarsened_grid(f)   a kernel f at stride f, taps from the output (each voxel's parent
//                       floor(ijk / f)); voxel size x f, origin at the centre of the f^3 block;
//   refined_grid(f)     its transpose: ijk * f + [0, f)^3; voxel size / f, origin moved to the
//                       centre of the first child;
//   dual_grid           the transposed 2x2x2 kernel: ijk + {0, 1}^3, origin minus half a voxel;
//   dilated_grid(n)     the centred kernel 2n + 1: every voxel within n of an active one, per
//                       axis; voxel size and origin kept.
// Factors are at most 2^20 per axis, and a grid whose candidates (voxels x f^3, x 8, x
// (2n + 1)^3; coarsening makes one a voxel) would pass 2^31 - 1 is refused before any is made.
#include <cstdint>

#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/convolution.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

GridBatch coarsened_grid(const GridBatch& grid, const Vec3i& factor, Stream stream = {});
GridBatch refined_grid(const GridBatch& grid, const Vec3i& factor, Stream stream = {});

// exclude_border false (fVDB's default): every corner of every voxel. True: dual voxel ijk is
// kept only where the primal voxels ijk + {0, 1}^3 are all active (fVDB's rule, index for index,
// so the result's coordinates are a subset of the primal's).
GridBatch dual_grid(const GridBatch& grid, bool exclude_border = false, Stream stream = {});

// dilation in [0, 2^19 - 1] (a kernel of at most 2^20).
GridBatch dilated_grid(const GridBatch& grid, int64_t dilation, Stream stream = {});

// The voxels where mask (bool [total_voxels], on the batch's device) is set, each in its own
// grid (a grid may end empty); voxel sizes and origins kept.
GridBatch pruned_grid(const GridBatch& grid, const TensorView& mask, Stream stream = {});

}  // namespace tilegrid::grid
