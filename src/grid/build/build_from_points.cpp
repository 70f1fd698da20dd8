// GridBatch from world points and from boxes: each turns its input into integer coordinates
// (on the CPU, or by points_to_ijk.cu for points on a GPU) and hands them to from_ijk.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "grid/grid_args.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/grid/grid_batch.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/grid_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

void check_points(const char* op, const TensorView& p) {
  check_dtype(op, "points", p, {DType::Float32, DType::Float64});
  check_ndim(op, "points", p, 2);
  TG_CHECK_VALUE(p.size(1) == 3, op, ": points must be [N, 3], got shape ", p.shape);
  check_contiguous(op, "points", p);
}

// Points of a CPU batch as doubles, validated (finite).
std::vector<double> points_as_doubles(const char* op, const JaggedTensor& points) {
  const TensorView& p = points.jdata();
  std::vector<double> out(size_t(p.numel()));
  for (size_t n = 0; n < out.size(); ++n) {
    out[n] = p.dtype == DType::Float32 ? double(p.data_ptr<const float>()[n])
                                       : p.data_ptr<const double>()[n];
    TG_CHECK_VALUE(std::isfinite(out[n]), op, ": points must be finite, got ", out[n], " at point ",
                   int64_t(n / 3));
  }
  return out;
}

int32_t to_int32(const char* op, double v) {
  TG_CHECK_VALUE(v >= double(std::numeric_limits<int32_t>::min()) &&
                     v <= double(std::numeric_limits<int32_t>::max()),
                 op, ": a point maps to voxel coordinate ", v,
                 ", outside the int32 range; use a larger voxel size");
  return int32_t(v);
}

JaggedTensor int32_jagged(const std::vector<int32_t>& xyz, const std::vector<int64_t>& offsets) {
  Tensor data = Tensor::empty({int64_t(xyz.size() / 3), 3}, DType::Int32, Device::cpu());
  std::copy(xyz.begin(), xyz.end(), static_cast<int32_t*>(data.data()));
  Tensor joffsets = Tensor::empty({int64_t(offsets.size())}, DType::Int64, Device::cpu());
  std::copy(offsets.begin(), offsets.end(), static_cast<int64_t*>(joffsets.data()));
  return JaggedTensor(data, joffsets);
}

// Shared by from_points (1 voxel a point) and from_nearest_voxels_to_points (8).
// Coordinates of the points' voxels: `corners` (1 or 8) rows a point, by `emit` on the CPU or
// by a kernel for points on a GPU.
template <class Emit>
JaggedTensor coordinates_of_points(const char* op, const JaggedTensor& points,
                                   const std::vector<Vec3d>& voxel_sizes,
                                   const std::vector<Vec3d>& origins, int corners, Emit emit,
                                   Stream stream) {
  check_points(op, points.jdata());
  const int64_t grids = points.num_tensors();
  const std::vector<VoxelTransform> transforms =
      transforms_of(required_voxel_sizes(op, voxel_sizes, grids),
                    per_grid(op, origins, grids, {0, 0, 0}, "origins", false));

  if (points.device().is_cuda()) {
#ifdef TILEGRID_WITH_CUDA
    const Device device = points.device();
    Tensor device_transforms = to_bytes(transforms, device, stream);
    const TensorView& p = points.jdata();
    Tensor ijk = Tensor::empty({p.size(0) * corners, 3}, DType::Int32, device, stream);
    const cuda::PointsError error = cuda::points_to_ijk(
        p.data, p.dtype, points.joffsets().view().data_ptr<const int64_t>(), grids, p.size(0),
        static_cast<const VoxelTransform*>(device_transforms.data()), corners,
        static_cast<int32_t*>(ijk.data()), device.index, stream);
    if (error != cuda::PointsError::None) {
      // The kernel only flags that a point is bad; the CPU path names which one and its
      // value (an error path: one copy of the points to the host).
      const JaggedTensor on_host(points.jdata().to(Device::cpu(), stream),
                                 points.joffsets().to(Device::cpu(), stream));
      (void)coordinates_of_points(op, on_host, voxel_sizes, origins, corners, emit, stream);
      TG_CHECK_VALUE(error != cuda::PointsError::NotFinite, op, ": points must be finite");
      throw ValueError(detail::concat(
          op, ": a point maps outside the int32 voxel range; use a larger voxel size"));
    }
    Tensor offsets = points.joffsets().to(Device::cpu(), stream);
    int64_t* o = static_cast<int64_t*>(offsets.data());
    for (int64_t b = 0; b <= grids; ++b) o[b] *= corners;
    return JaggedTensor(ijk, offsets.to(device, stream), stream);
#else
    throw Error(detail::concat(op, ": tilegrid was built without CUDA"));
#endif
  }

  const std::vector<double> p = points_as_doubles(op, points);
  const int64_t* offsets = points.joffsets().view().data_ptr<const int64_t>();
  std::vector<int32_t> xyz;
  std::vector<int64_t> out_offsets{0};
  for (int64_t b = 0; b < grids; ++b) {
    for (int64_t n = offsets[b]; n < offsets[b + 1]; ++n) {
      double u[3];
      transforms[size_t(b)].world_to_voxel(&p[size_t(3 * n)], u);
      emit(u, xyz);
    }
    out_offsets.push_back(int64_t(xyz.size() / 3));
  }
  return int32_jagged(xyz, out_offsets);
}

}  // namespace

VoxelTransform GridBatch::transform(int64_t grid) const {
  TG_CHECK_VALUE(grid >= 0 && grid < num_grids(), "GridBatch.transform: grid ", grid,
                 " out of range for a batch of ", num_grids());
  const Vec3d& s = voxel_sizes_[size_t(grid)];
  const Vec3d& o = origins_[size_t(grid)];
  return {{s[0], s[1], s[2]}, {o[0], o[1], o[2]}};
}

GridBatch GridBatch::from_points(const JaggedTensor& points, const std::vector<Vec3d>& voxel_sizes,
                                 const std::vector<Vec3d>& origins, Stream stream) {
  constexpr const char* kOp = "GridBatch.from_points";
  JaggedTensor ijk = coordinates_of_points(
      kOp, points, voxel_sizes, origins, 1,
      [](const double u[3], std::vector<int32_t>& xyz) {
        for (int a = 0; a < 3; ++a) xyz.push_back(to_int32(kOp, std::round(u[a])));
      },
      stream);
  return from_ijk(ijk, voxel_sizes, origins, stream);
}

GridBatch GridBatch::from_nearest_voxels_to_points(const JaggedTensor& points,
                                                   const std::vector<Vec3d>& voxel_sizes,
                                                   const std::vector<Vec3d>& origins,
                                                   Stream stream) {
  constexpr const char* kOp = "GridBatch.from_nearest_voxels_to_points";
  JaggedTensor ijk = coordinates_of_points(
      kOp, points, voxel_sizes, origins, 8,
      [](const double u[3], std::vector<int32_t>& xyz) {
        int32_t base[3];
        for (int a = 0; a < 3; ++a) base[a] = to_int32(kOp, std::floor(u[a]));
        for (int corner = 0; corner < 8; ++corner)
          for (int a = 0; a < 3; ++a)
            xyz.push_back(to_int32(kOp, double(base[a]) + ((corner >> (2 - a)) & 1)));
      },
      stream);
  return from_ijk(ijk, voxel_sizes, origins, stream);
}

GridBatch GridBatch::from_dense(int64_t num_grids, const std::array<int32_t, 3>& size,
                                const std::array<int32_t, 3>& ijk_min,
                                const std::vector<Vec3d>& voxel_sizes,
                                const std::vector<Vec3d>& origins) {
  constexpr const char* kOp = "GridBatch.from_dense";
  TG_CHECK_VALUE(num_grids >= 1, kOp, ": num_grids must be >= 1, got ", num_grids);
  for (int a = 0; a < 3; ++a) {
    TG_CHECK_VALUE(size[a] >= 0, kOp, ": size must be >= 0, got ", size[a]);
    TG_CHECK_VALUE(int64_t(ijk_min[a]) + size[a] - 1 <= std::numeric_limits<int32_t>::max(), kOp,
                   ": the box leaves the int32 range");
  }
  std::vector<int32_t> one;
  for (int32_t i = 0; i < size[0]; ++i)
    for (int32_t j = 0; j < size[1]; ++j)
      for (int32_t k = 0; k < size[2]; ++k) {
        one.push_back(ijk_min[0] + i);
        one.push_back(ijk_min[1] + j);
        one.push_back(ijk_min[2] + k);
      }
  std::vector<int32_t> xyz;
  std::vector<int64_t> offsets{0};
  for (int64_t b = 0; b < num_grids; ++b) {
    xyz.insert(xyz.end(), one.begin(), one.end());
    offsets.push_back(int64_t(xyz.size() / 3));
  }
  return from_ijk(int32_jagged(xyz, offsets), voxel_sizes, origins);
}

}  // namespace tilegrid::grid
