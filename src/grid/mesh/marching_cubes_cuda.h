#pragma once
// The CUDA passes of marching_cubes (internal; marching_cubes_cuda.cu).
#include <cstdint>

#include "grid/mesh/marching_cubes_cells.h"
#include "tilegrid/grid/marching_cubes.h"

namespace tilegrid::grid::cuda {

// in.table is ignored (the kernels read the table from constant memory).
CubeMesh marching_cubes(const CubeInputs& in, int64_t voxels, DType dtype, int device,
                        Stream stream);

}  // namespace tilegrid::grid::cuda
