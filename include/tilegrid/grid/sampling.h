#pragma once
// Trilinear sampling of voxel features at world points, and its adjoint, splatting point
// values into voxels. Features are [total_voxels, C] in the batch's row order; points are a
// JaggedTensor [N, 3] over the batch's grids (point n of tensor b is sampled in grid b).
// float32 or float64, one dtype for all operands; all on the grid's device (CPU, or a GPU after
// GridBatch::to).
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

// out[n] = sum over the 8 voxels around point n of weight * features[row]; out: [N, C].
void sample_trilinear(const GridBatch& grid, const JaggedTensor& points, const TensorView& features,
                      const TensorView& out, Stream stream = {});

// Gradient of sample_trilinear's output with respect to the points: grad_points [N, 3] from
// grad_out [N, C]. (Its gradient with respect to features is splat_trilinear of grad_out.)
void sample_trilinear_backward_points(const GridBatch& grid, const JaggedTensor& points,
                                      const TensorView& features, const TensorView& grad_out,
                                      const TensorView& grad_points, Stream stream = {});

// out[row] = sum over points n and their 8 voxels of weight * values[n]; out:
// [total_voxels, C], overwritten. The adjoint of sample_trilinear in the features.
void splat_trilinear(const GridBatch& grid, const JaggedTensor& points, const TensorView& values,
                     const TensorView& out, Stream stream = {});

}  // namespace tilegrid::grid
