#pragma once
// Marching cubes on a per-voxel scalar field (fVDB's marching_cubes): the surface where the
// field, given at the active voxels' centres, crosses `level`, over the cubes of 8 active
// voxel centres. Vertices lie on the edges between neighbouring active voxels (shared by the
// cubes around an edge, so the mesh is watertight where the cubes are whole), by linear
// interpolation; normals are the field's trilinear gradient there (pointing to where the field
// is above the level), triangles wind counter-clockwise seen from that side. The cube table is
// derived from the faces' cuts (src/grid/mesh/marching_cubes_table.h), each ambiguous face cut off
// around its corners below the level. float32 or float64 field; CPU or GPU (the same code).
#include <cstdint>

#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

struct CubeMesh {
  Tensor vertices;        // [V, 3] world positions (the field's dtype), grid by grid
  Tensor normals;         // [V, 3] unit normals
  Tensor faces;           // int64 [F, 3]: vertex numbers within the face's own grid
  Tensor vertex_offsets;  // int64 [B + 1]
  Tensor face_offsets;    // int64 [B + 1]
};

// field: [total_voxels] on the grid's device. On CUDA the call waits for `stream` twice (to
// size the vertices and the faces). On sparse grids, a vertex on an edge that no whole cube
// uses is still emitted (it belongs to no face).
CubeMesh marching_cubes(const GridBatch& grid, const TensorView& field, double level = 0.0,
                        Stream stream = {});

}  // namespace tilegrid::grid
