#pragma once
// CUDA queries over a GridBatch's tree (internal). Pointers are device pointers; the callers
// in grid_batch.cpp and sampling.cpp validate shapes, dtypes and devices first.
#include <cstdint>

#include "tilegrid/core/device.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/index_tree.h"
#include "tilegrid/grid/transform.h"

namespace tilegrid::grid::cuda {

// The tree of a batch built on the GPU (build_from_ijk_cuda.cu): node arrays as bytes,
// upper-node and voxel offsets per grid (int64 [B+1]), all on the device.
struct BuiltTree {
  Tensor uppers, lowers, leaves, upper_offsets, voxel_offsets;
  int64_t num_voxels = 0;
};
BuiltTree build_tree(const int32_t* xyz, const int64_t* joffsets, int64_t num_grids, int64_t n,
                     int device, Stream stream);

// Voxel coordinates of world points: corners == 1, the voxel holding each point (rows as the
// points); corners == 8, the 8 voxels around each point (8 rows a point). The worst problem
// met is returned (the call synchronises `stream`).
enum class PointsError : int { None = 0, OutOfRange = 1, NotFinite = 2 };
PointsError points_to_ijk(const void* xyz, DType dtype, const int64_t* joffsets, int64_t num_grids,
                          int64_t n, const VoxelTransform* transforms, int corners, int32_t* out,
                          int device, Stream stream);

// The voxels that the triangles of a batch of meshes touch (GridBatch.from_mesh on a GPU).
// Device pointers; faces index their own mesh's vertices. The worst problem met is returned
// (the call synchronises `stream` once, to read the error and the voxel count).
enum class MeshError : int { None = 0, BadFace = 1, NotFinite = 2, OutOfRange = 3 };
struct MeshInput {
  const void* vertices;  // [num_vertices, 3], float32 or float64 (vertices_dtype)
  DType vertices_dtype;
  const int64_t* voff;   // [num_grids + 1]
  const void* faces;     // [num_faces, 3], int32 or int64 (faces_dtype)
  DType faces_dtype;
  const int64_t* foff;   // [num_grids + 1]
  int64_t num_grids, num_faces;
  const VoxelTransform* transforms;  // [num_grids], on the device
};
struct MeshVoxels {
  Tensor xyz;      // [n, 3] int32, grid by grid (duplicates kept)
  Tensor offsets;  // [num_grids + 1] int64
};
MeshError mesh_to_ijk(const MeshInput& in, int device, Stream stream, MeshVoxels& out);

// out[n] = row of voxel xyz[n] of its tensor's grid (joffsets: [num_tensors + 1]), or -1.
void ijk_to_index(const TreeView& tree, const int32_t* xyz, const int64_t* joffsets,
                  int64_t num_tensors, int64_t n, int64_t* out, int device, Stream stream);

// keep[o] = whether map[t][o] >= 0 for every tap t < volume (map int32 [volume, n]): every
// voxel that output o reads is active (dual_grid's exclude_border).
void all_taps_found(const int32_t* map, int64_t volume, int64_t n, bool* keep, int device,
                    Stream stream);

// The rows of xyz [n, 3] (grids by voxel_offsets [num_grids + 1]) where keep is set, grid by
// grid (pruned_grid). One read-back, of the kept count, to size the output.
struct KeptVoxels {
  Tensor xyz;      // [kept, 3] int32
  Tensor offsets;  // [num_grids + 1] int64
};
KeptVoxels kept_voxels(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids,
                       int64_t n, const bool* keep, int device, Stream stream);

// xyz[row] = coordinates of every active voxel.
void active_ijk(const LeafNode* leaves, int64_t num_leaves, int32_t* xyz, int device,
                Stream stream);

struct PointSet {
  const void* xyz;          // [n, 3], float32 or float64 (dtype)
  const int64_t* joffsets;  // [num_tensors + 1]
  int64_t num_tensors, n;
  DType dtype;
};

void sample_trilinear(const TreeView& tree, const VoxelTransform* transforms,
                      const PointSet& points, const void* features, int64_t channels, void* out,
                      int device, Stream stream);
void sample_trilinear_backward_points(const TreeView& tree, const VoxelTransform* transforms,
                                      const PointSet& points, const void* features,
                                      const void* grad_out, int64_t channels, void* grad_points,
                                      int device, Stream stream);
// out ([total_voxels, channels]) is zeroed, then receives the points' weighted values.
void splat_trilinear(const TreeView& tree, const VoxelTransform* transforms, const PointSet& points,
                     const void* values, int64_t channels, void* out, int64_t total_voxels,
                     int device, Stream stream);

}  // namespace tilegrid::grid::cuda
