#pragma once
// GridBatch: B sparse voxel grids (index trees, see index_tree.h) in one set of node arrays,
// each grid with its own voxel size and world origin. Topology only: features live in a
// separate [N, ...] tensor (a JaggedTensor whose joffsets are voxel_offsets()), so one grid
// serves any number of feature tensors.
//
// from_ijk, from_points, from_nearest_voxels_to_points and from_mesh build where their inputs
// live (in parallel on a GPU); from_dense builds on the CPU. A batch moves with to(); on a GPU,
// lookups, ijk() and sampling run as CUDA kernels over the same traversal code.
#include <array>
#include <cstdint>
#include <vector>

#include "tilegrid/core/jagged_tensor.h"
#include "tilegrid/grid/index_tree.h"
#include "tilegrid/grid/transform.h"

namespace tilegrid::grid {

using Vec3d = std::array<double, 3>;

class GridBatch {
 public:
  // One grid per tensor of `ijk` (int32 [N, 3], jagged over the batch); duplicate coordinates
  // are merged, empty grids are allowed. voxel_sizes / origins: one per grid (all > 0), or
  // empty for unit voxels at the world origin.
  // On the CPU or, for coordinates on a GPU, built there in parallel.
  static GridBatch from_ijk(const JaggedTensor& ijk, const std::vector<Vec3d>& voxel_sizes = {},
                            const std::vector<Vec3d>& origins = {}, Stream stream = {});

  // The voxels that contain world points (float32 or float64 [N, 3], jagged over the batch;
  // NaN or coordinates beyond the int32 range are errors): ijk = round((p - origin) / size).
  static GridBatch from_points(const JaggedTensor& points, const std::vector<Vec3d>& voxel_sizes,
                               const std::vector<Vec3d>& origins = {}, Stream stream = {});
  // The 8 voxels around each point (the cell trilinear sampling reads):
  // floor((p - origin) / size) + {0, 1}^3.
  static GridBatch from_nearest_voxels_to_points(const JaggedTensor& points,
                                                 const std::vector<Vec3d>& voxel_sizes,
                                                 const std::vector<Vec3d>& origins = {},
                                                 Stream stream = {});
  // The voxels whose cubes intersect a triangle of each grid's mesh: vertices float32/float64
  // [V, 3] (world units) and faces int32/int64 [F, 3] (vertex indices within the grid's own
  // vertices), each jagged over the batch.
  static GridBatch from_mesh(const JaggedTensor& vertices, const JaggedTensor& faces,
                             const std::vector<Vec3d>& voxel_sizes,
                             const std::vector<Vec3d>& origins = {}, Stream stream = {});
  // Every voxel of the box [ijk_min, ijk_min + size) in each of `num_grids` grids.
  static GridBatch from_dense(int64_t num_grids, const std::array<int32_t, 3>& size,
                              const std::array<int32_t, 3>& ijk_min = {0, 0, 0},
                              const std::vector<Vec3d>& voxel_sizes = {},
                              const std::vector<Vec3d>& origins = {});

  int64_t num_grids() const { return int64_t(voxel_sizes_.size()); }
  VoxelTransform transform(int64_t grid) const;

  // The same batch with its tree on `device`.
  GridBatch to(Device device, Stream stream = {}) const;
  int64_t total_voxels() const { return voxel_counts_total_; }
  int64_t num_voxels(int64_t grid) const;
  Device device() const { return device_; }

  // int64 [B+1]: grid b's voxels are feature rows [voxel_offsets[b], voxel_offsets[b+1]).
  const Tensor& voxel_offsets() const { return voxel_offsets_; }
  const std::vector<Vec3d>& voxel_sizes() const { return voxel_sizes_; }
  const std::vector<Vec3d>& origins() const { return origins_; }

  int64_t num_upper_nodes() const;
  int64_t num_lower_nodes() const;
  int64_t num_leaves() const;
  // Bytes of the tree (all node arrays and offsets), the memory cost of the topology.
  int64_t tree_bytes() const;

  // Row of each coordinate in the features (-1 where the voxel is absent): int64 [N] for
  // `ijk` int32 [N, 3] jagged over this batch's grids.
  Tensor ijk_to_index(const JaggedTensor& ijk, Stream stream = {}) const;
  // Coordinates of every active voxel, in feature-row order: int32 [total_voxels, 3].
  JaggedTensor ijk(Stream stream = {}) const;

  TreeView view() const;
  // VoxelTransform [num_grids] on the batch's device, for kernels.
  const VoxelTransform* transforms() const {
    return static_cast<const VoxelTransform*>(transforms_.data());
  }

 private:
  Device device_ = Device::cpu();
  Tensor uppers_, lowers_, leaves_;  // node arrays as bytes
  Tensor upper_offsets_;             // int64 [B+1]
  Tensor voxel_offsets_;             // int64 [B+1]
  Tensor transforms_;                // VoxelTransform [B] as bytes
  std::vector<int64_t> voxel_offsets_host_;
  int64_t voxel_counts_total_ = 0;
  std::vector<Vec3d> voxel_sizes_, origins_;
};

}  // namespace tilegrid::grid
