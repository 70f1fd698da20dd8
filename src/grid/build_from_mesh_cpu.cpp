// GridBatch from triangle meshes on the CPU: each triangle, in voxel coordinates, is tested
// against the unit cubes of the voxels in its bounding box (triangle_box.h, shared with the
// CUDA build to come); the voxels it touches go to from_ijk.
#include <cmath>
#include <limits>
#include <vector>

#include "grid/grid_args.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/grid/grid_batch.h"
#include "tilegrid/grid/triangle_box.h"

namespace tilegrid::grid {
namespace {

constexpr const char* kOp = "GridBatch.from_mesh";

double vertex_coord(const TensorView& v, int64_t i) {
  return v.dtype == DType::Float32 ? double(v.data_ptr<const float>()[i])
                                   : v.data_ptr<const double>()[i];
}

int64_t face_index(const TensorView& f, int64_t i) {
  return f.dtype == DType::Int32 ? int64_t(f.data_ptr<const int32_t>()[i])
                                 : f.data_ptr<const int64_t>()[i];
}

void check_table(const char* name, const TensorView& t, std::initializer_list<DType> dtypes) {
  check_dtype(kOp, name, t, dtypes);
  check_ndim(kOp, name, t, 2);
  TG_CHECK_VALUE(t.size(1) == 3, kOp, ": ", name, " must be [N, 3], got shape ", t.shape);
  check_contiguous(kOp, name, t);
  TG_CHECK(t.device.is_cpu(), kOp, ": building on ", t.device,
           " is not implemented yet; build from CPU tensors");
}

}  // namespace

GridBatch GridBatch::from_mesh(const JaggedTensor& vertices, const JaggedTensor& faces,
                               const std::vector<Vec3d>& voxel_sizes,
                               const std::vector<Vec3d>& origins) {
  const TensorView& v = vertices.jdata();
  const TensorView& f = faces.jdata();
  check_table("vertices", v, {DType::Float32, DType::Float64});
  check_table("faces", f, {DType::Int32, DType::Int64});
  const int64_t grids = vertices.num_tensors();
  TG_CHECK_VALUE(faces.num_tensors() == grids, kOp, ": vertices hold ", grids,
                 " meshes but faces hold ", faces.num_tensors());
  const std::vector<VoxelTransform> transforms =
      transforms_of(required_voxel_sizes(kOp, voxel_sizes, grids),
                    per_grid(kOp, origins, grids, {0, 0, 0}, "origins", false));

  const int64_t* voff = vertices.joffsets().view().data_ptr<const int64_t>();
  const int64_t* foff = faces.joffsets().view().data_ptr<const int64_t>();
  std::vector<int32_t> xyz;
  std::vector<int64_t> offsets{0};
  for (int64_t b = 0; b < grids; ++b) {
    const VoxelTransform& grid_transform = transforms[size_t(b)];
    const int64_t num_vertices = voff[b + 1] - voff[b];
    for (int64_t t = foff[b]; t < foff[b + 1]; ++t) {
      double tri[3][3];  // vertices in continuous voxel coordinates
      for (int corner = 0; corner < 3; ++corner) {
        const int64_t index = face_index(f, 3 * t + corner);
        TG_CHECK_VALUE(index >= 0 && index < num_vertices, kOp, ": face ", t - foff[b], " of mesh ",
                       b, " names vertex ", index, " but the mesh has ", num_vertices);
        for (int a = 0; a < 3; ++a) {
          const double w = vertex_coord(v, 3 * (voff[b] + index) + a);
          TG_CHECK_VALUE(std::isfinite(w), kOp, ": vertices must be finite, got ", w);
          tri[corner][a] = (w - grid_transform.origin[a]) / grid_transform.voxel_size[a];
        }
      }
      int64_t lo[3], hi[3];
      for (int a = 0; a < 3; ++a) {
        lo[a] = int64_t(std::floor(std::fmin(tri[0][a], std::fmin(tri[1][a], tri[2][a])) + 0.5));
        hi[a] = int64_t(std::ceil(std::fmax(tri[0][a], std::fmax(tri[1][a], tri[2][a])) - 0.5));
        TG_CHECK_VALUE(lo[a] >= std::numeric_limits<int32_t>::min() &&
                           hi[a] <= std::numeric_limits<int32_t>::max(),
                       kOp, ": a triangle leaves the int32 voxel range; use a larger voxel size");
      }
      for (int64_t i = lo[0]; i <= hi[0]; ++i)
        for (int64_t j = lo[1]; j <= hi[1]; ++j)
          for (int64_t k = lo[2]; k <= hi[2]; ++k) {
            const double centre[3] = {double(i), double(j), double(k)};
            double rel[3][3];
            for (int corner = 0; corner < 3; ++corner)
              for (int a = 0; a < 3; ++a) rel[corner][a] = tri[corner][a] - centre[a];
            if (!triangle_overlaps_cube(rel[0], rel[1], rel[2], 0.5)) continue;
            xyz.push_back(int32_t(i));
            xyz.push_back(int32_t(j));
            xyz.push_back(int32_t(k));
          }
    }
    offsets.push_back(int64_t(xyz.size() / 3));
  }
  Tensor data = Tensor::empty({int64_t(xyz.size() / 3), 3}, DType::Int32, Device::cpu());
  std::copy(xyz.begin(), xyz.end(), static_cast<int32_t*>(data.data()));
  Tensor joffsets = Tensor::empty({int64_t(offsets.size())}, DType::Int64, Device::cpu());
  std::copy(offsets.begin(), offsets.end(), static_cast<int64_t*>(joffsets.data()));
  return from_ijk(JaggedTensor(data, joffsets), voxel_sizes, origins);
}

}  // namespace tilegrid::grid
