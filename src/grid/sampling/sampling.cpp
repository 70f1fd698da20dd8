// Trilinear sampling and splatting: argument checks, the CPU loops, and dispatch to the CUDA
// kernels (sample_trilinear.cu) for grids on a GPU. Both run TreeView::index_of and
// TrilinearCell; weights and sums in float64.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda_build.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/element_access.h"
#include "tilegrid/grid/sampling.h"
#include "tilegrid/grid/trilinear.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/grid_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

void check_matrix(const char* op, const char* name, const TensorView& t, int64_t rows, int64_t cols,
                  DType dtype, Device device) {
  check_dtype(op, name, t, {dtype});
  check_shape(op, name, t, {rows, cols});
  check_contiguous(op, name, t);
  TG_CHECK_VALUE(t.device == device, op, ": ", name, " is on ", t.device, " but the grid is on ",
                 device);
}

// Validates the points against the grid; returns the points' dtype.
DType check_points(const char* op, const GridBatch& grid, const JaggedTensor& points) {
  const TensorView& p = points.jdata();
  check_dtype(op, "points", p, {DType::Float32, DType::Float64});
  check_ndim(op, "points", p, 2);
  check_matrix(op, "points", p, p.size(0), 3, p.dtype, grid.device());
  TG_CHECK_VALUE(points.num_tensors() == grid.num_grids(), op, ": points hold ",
                 points.num_tensors(), " tensors but the batch has ", grid.num_grids(), " grids");
  return p.dtype;
}

#ifdef TILEGRID_WITH_CUDA
cuda::PointSet point_set(const JaggedTensor& points) {
  const TensorView& p = points.jdata();
  return {p.data, points.joffsets().view().data_ptr<const int64_t>(), points.num_tensors(),
          p.size(0), p.dtype};
}
#endif

// Calls visit(n, cell, rows[8]) for every point, rows[c] = -1 for inactive voxels.
template <class Visit>
void for_each_point(const GridBatch& grid, const JaggedTensor& points, Visit visit) {
  const TensorView& p = points.jdata();
  const int64_t* offsets = points.joffsets().view().data_ptr<const int64_t>();
  const TreeView tree = grid.view();
  for (int64_t b = 0; b < grid.num_grids(); ++b) {
    const VoxelTransform t = grid.transform(b);
    for (int64_t n = offsets[b]; n < offsets[b + 1]; ++n) {
      const double world[3] = {load_element(p.dtype, p.data, 3 * n),
                               load_element(p.dtype, p.data, 3 * n + 1),
                               load_element(p.dtype, p.data, 3 * n + 2)};
      double u[3];
      t.world_to_voxel(world, u);
      const TrilinearCell cell = TrilinearCell::at(u);
      int64_t rows[8];
      CachedLookup lookup(tree, b);  // the 8 corners mostly share a leaf
      for (int c = 0; c < 8; ++c) rows[c] = cell.in_range ? lookup.index_of(cell.voxel(c)) : -1;
      visit(n, t, cell, rows);
    }
  }
}

}  // namespace

void sample_trilinear(const GridBatch& grid, const JaggedTensor& points, const TensorView& features,
                      const TensorView& out, Stream stream) {
  constexpr const char* kOp = "sample_trilinear";
  const DType dtype = check_points(kOp, grid, points);
  check_ndim(kOp, "features", features, 2);
  const int64_t channels = features.size(1);
  check_matrix(kOp, "features", features, grid.total_voxels(), channels, dtype, grid.device());
  check_matrix(kOp, "out", out, points.num_rows(), channels, dtype, grid.device());
  if (grid.device().is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::sample_trilinear(grid.view(), grid.transforms(), point_set(points), features.data,
                           channels, out.data, grid.device().index, stream);
#endif
    return;
  }
  std::vector<double> acc(static_cast<size_t>(channels));
  for_each_point(
      grid, points,
      [&](int64_t n, const VoxelTransform&, const TrilinearCell& cell, const int64_t* rows) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int c = 0; c < 8; ++c) {
          if (rows[c] < 0) continue;
          const double w = cell.weight(c);
          for (int64_t ch = 0; ch < channels; ++ch)
            acc[size_t(ch)] += w * load_element(dtype, features.data, rows[c] * channels + ch);
        }
        for (int64_t ch = 0; ch < channels; ++ch)
          store_element(dtype, out.data, n * channels + ch, acc[size_t(ch)]);
      });
}

void sample_trilinear_backward_points(const GridBatch& grid, const JaggedTensor& points,
                                      const TensorView& features, const TensorView& grad_out,
                                      const TensorView& grad_points, Stream stream) {
  constexpr const char* kOp = "sample_trilinear_backward_points";
  const DType dtype = check_points(kOp, grid, points);
  check_ndim(kOp, "features", features, 2);
  const int64_t channels = features.size(1);
  const Device device = grid.device();
  check_matrix(kOp, "features", features, grid.total_voxels(), channels, dtype, device);
  check_matrix(kOp, "grad_out", grad_out, points.num_rows(), channels, dtype, device);
  check_matrix(kOp, "grad_points", grad_points, points.num_rows(), 3, dtype, device);
  if (device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::sample_trilinear_backward_points(grid.view(), grid.transforms(), point_set(points),
                                           features.data, grad_out.data, channels, grad_points.data,
                                           device.index, stream);
#endif
    return;
  }
  for_each_point(
      grid, points,
      [&](int64_t n, const VoxelTransform& t, const TrilinearCell& cell, const int64_t* rows) {
        double g[3] = {0, 0, 0};
        for (int c = 0; c < 8; ++c) {
          if (rows[c] < 0) continue;
          double dot = 0;  // grad_out[n] . features[row]
          for (int64_t ch = 0; ch < channels; ++ch)
            dot += load_element(dtype, grad_out.data, n * channels + ch) *
                   load_element(dtype, features.data, rows[c] * channels + ch);
          for (int a = 0; a < 3; ++a) g[a] += dot * cell.weight_gradient(c, a);
        }
        // u = (p - origin) / voxel_size, so d/dp = d/du / voxel_size.
        for (int a = 0; a < 3; ++a)
          store_element(dtype, grad_points.data, 3 * n + a, g[a] / t.voxel_size[a]);
      });
}

void splat_trilinear(const GridBatch& grid, const JaggedTensor& points, const TensorView& values,
                     const TensorView& out, Stream stream) {
  constexpr const char* kOp = "splat_trilinear";
  const DType dtype = check_points(kOp, grid, points);
  check_ndim(kOp, "values", values, 2);
  const int64_t channels = values.size(1);
  check_matrix(kOp, "values", values, points.num_rows(), channels, dtype, grid.device());
  check_matrix(kOp, "out", out, grid.total_voxels(), channels, dtype, grid.device());
  if (grid.device().is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::splat_trilinear(grid.view(), grid.transforms(), point_set(points), values.data, channels,
                          out.data, grid.total_voxels(), grid.device().index, stream);
#endif
    return;
  }
  std::vector<double> acc(static_cast<size_t>(grid.total_voxels() * channels), 0.0);
  for_each_point(
      grid, points,
      [&](int64_t n, const VoxelTransform&, const TrilinearCell& cell, const int64_t* rows) {
        for (int c = 0; c < 8; ++c) {
          if (rows[c] < 0) continue;
          const double w = cell.weight(c);
          for (int64_t ch = 0; ch < channels; ++ch)
            acc[size_t(rows[c] * channels + ch)] +=
                w * load_element(dtype, values.data, n * channels + ch);
        }
      });
  for (size_t i = 0; i < acc.size(); ++i) store_element(dtype, out.data, int64_t(i), acc[i]);
}

}  // namespace tilegrid::grid
