#pragma once
// The output grid of a convolution geometry with the derived grids' limits (internal; used by
// grid/build/derived_grids.cpp): kernel sizes and strides up to 2^20 per axis instead of a
// convolution's 31 and 1024, and more than 2^31 - 1 candidate voxels refused before they are
// made (a kernel that tiles its stride makes one a voxel).
#include "tilegrid/grid/convolution.h"

namespace tilegrid::grid {

GridBatch derived_grid(const char* op, const GridBatch& source, const ConvGeometry& geometry,
                       Stream stream);

}  // namespace tilegrid::grid
