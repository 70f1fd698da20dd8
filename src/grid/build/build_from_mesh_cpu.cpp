// GridBatch from triangle meshes: each triangle, in voxel coordinates, is tested against the
// unit cubes of the voxels in its bounding box (triangle_voxels.h, the same code on the CPU and
// in mesh_to_ijk.cu on a GPU); the voxels it touches go to from_ijk.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "grid/grid_args.h"
#include "grid/build/triangle_voxels.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/grid/grid_batch.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/grid_cuda.h"
#endif

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
}

// The voxels each triangle touches, mesh by mesh, for a CPU batch (checking each face's
// indices and vertices as it goes).
JaggedTensor mesh_voxels_cpu(const JaggedTensor& vertices, const JaggedTensor& faces,
                             const std::vector<VoxelTransform>& transforms) {
  const TensorView& v = vertices.jdata();
  const TensorView& f = faces.jdata();
  const int64_t grids = vertices.num_tensors();
  const int64_t* voff = vertices.joffsets().view().data_ptr<const int64_t>();
  const int64_t* foff = faces.joffsets().view().data_ptr<const int64_t>();
  std::vector<int32_t> xyz;
  std::vector<int64_t> offsets{0};
  for (int64_t b = 0; b < grids; ++b) {
    const int64_t num_vertices = voff[b + 1] - voff[b];
    for (int64_t t = foff[b]; t < foff[b + 1]; ++t) {
      double world[3][3];
      for (int corner = 0; corner < 3; ++corner) {
        const int64_t index = face_index(f, 3 * t + corner);
        TG_CHECK_VALUE(index >= 0 && index < num_vertices, kOp, ": face ", t - foff[b], " of mesh ",
                       b, " names vertex ", index, " but the mesh has ", num_vertices);
        for (int a = 0; a < 3; ++a) world[corner][a] = vertex_coord(v, 3 * (voff[b] + index) + a);
      }
      VoxelTriangle tri;
      TG_CHECK_VALUE(to_voxel_triangle(transforms[size_t(b)], world, tri), kOp,
                     ": vertices must be finite; face ", t - foff[b], " of mesh ", b,
                     " has a NaN or infinite vertex");
      TG_CHECK_VALUE(in_int32_range(tri), kOp,
                     ": a triangle leaves the int32 voxel range; use a larger voxel size");
      for_each_touched_voxel(tri, [&](int32_t i, int32_t j, int32_t k) {
        xyz.insert(xyz.end(), {i, j, k});
      });
    }
    offsets.push_back(int64_t(xyz.size() / 3));
  }
  Tensor data = Tensor::empty({int64_t(xyz.size() / 3), 3}, DType::Int32, Device::cpu());
  std::copy(xyz.begin(), xyz.end(), static_cast<int32_t*>(data.data()));
  Tensor joffsets = Tensor::empty({int64_t(offsets.size())}, DType::Int64, Device::cpu());
  std::copy(offsets.begin(), offsets.end(), static_cast<int64_t*>(joffsets.data()));
  return JaggedTensor(data, joffsets);
}

// Voxels of meshes on a GPU, with the CPU path's errors (which name the face and vertex).
JaggedTensor mesh_voxels_cuda(const JaggedTensor& vertices, const JaggedTensor& faces,
                              const std::vector<VoxelTransform>& transforms, Stream stream) {
#ifdef TILEGRID_WITH_CUDA
  const Device device = vertices.device();
  Tensor device_transforms = to_bytes(transforms, device, stream);
  const TensorView& v = vertices.jdata();
  const TensorView& f = faces.jdata();
  const cuda::MeshInput in{v.data,
                           v.dtype,
                           vertices.joffsets().view().data_ptr<const int64_t>(),
                           f.data,
                           f.dtype,
                           faces.joffsets().view().data_ptr<const int64_t>(),
                           vertices.num_tensors(),
                           f.size(0),
                           static_cast<const VoxelTransform*>(device_transforms.data())};
  cuda::MeshVoxels out;
  const cuda::MeshError error = cuda::mesh_to_ijk(in, device.index, stream, out);
  if (error != cuda::MeshError::None) {
    // The kernel only flags that a face is bad; the CPU path names which one and why (an
    // error path: one copy of the mesh to the host).
    const Device cpu = Device::cpu();
    (void)mesh_voxels_cpu(
        JaggedTensor(vertices.jdata().to(cpu, stream), vertices.joffsets().to(cpu, stream)),
        JaggedTensor(faces.jdata().to(cpu, stream), faces.joffsets().to(cpu, stream)),
        transforms);
  }
  TG_CHECK_VALUE(error != cuda::MeshError::BadFace, kOp,
                 ": a face names a vertex outside its mesh (indices must be in [0, vertices of "
                 "that mesh))");
  TG_CHECK_VALUE(error != cuda::MeshError::NotFinite, kOp, ": vertices must be finite");
  TG_CHECK_VALUE(error != cuda::MeshError::OutOfRange, kOp,
                 ": a triangle leaves the int32 voxel range; use a larger voxel size");
  return JaggedTensor::from_trusted_offsets(out.xyz, out.offsets);
#else
  (void)vertices, (void)faces, (void)transforms, (void)stream;
  throw Error(detail::concat(kOp, ": tilegrid was built without CUDA"));
#endif
}

}  // namespace

GridBatch GridBatch::from_mesh(const JaggedTensor& vertices, const JaggedTensor& faces,
                               const std::vector<Vec3d>& voxel_sizes,
                               const std::vector<Vec3d>& origins, Stream stream) {
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

  TG_CHECK_VALUE(faces.device() == vertices.device(), kOp, ": vertices are on ",
                 vertices.device(), " but faces are on ", faces.device());
  if (vertices.device().is_cuda())
    return from_ijk(mesh_voxels_cuda(vertices, faces, transforms, stream), voxel_sizes, origins,
                    stream);

  return from_ijk(mesh_voxels_cpu(vertices, faces, transforms), voxel_sizes, origins, stream);
}

}  // namespace tilegrid::grid
