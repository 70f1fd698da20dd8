// The derived grids (derived.h): four convolution geometries through the convolution's output
// grid, and the selection of pruned_grid and dual_grid(exclude_border) on the CPU or the GPU.
#include "tilegrid/grid/derived.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda_build.h"
#include "grid/conv/derived_geometry.h"
#include "grid/conv/map_args.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/grid_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

// A dilation reaches n voxels each way: a kernel of 2n + 1, at most the derived grids' 2^20.
constexpr int64_t kMaxDilation = (int64_t(1) << 19) - 1;

// The voxels of `grid` where keep (bool [total_voxels], on the grid's device) is set, with the
// given voxel sizes and origins.
GridBatch kept(const GridBatch& grid, const bool* keep, const std::vector<Vec3d>& sizes,
               const std::vector<Vec3d>& origins, const char* op, Stream stream) {
  const JaggedTensor ijk = grid.ijk(stream);
  const int32_t* xyz = ijk.jdata().view().data_ptr<const int32_t>();
  const int64_t* offsets = grid.voxel_offsets().view().data_ptr<const int64_t>();
  const int64_t n = grid.total_voxels(), num_grids = grid.num_grids();
  if (grid.device().is_cuda()) {
    require_cuda_build(op);
#ifdef TILEGRID_WITH_CUDA
    cuda::KeptVoxels out =
        cuda::kept_voxels(xyz, offsets, num_grids, n, keep, grid.device().index, stream);
    return GridBatch::from_ijk(JaggedTensor::from_trusted_offsets(out.xyz, out.offsets), sizes,
                               origins, stream);
#endif
  }
  const int64_t count = std::count(keep, keep + n, true);
  Tensor data = Tensor::empty({count, 3}, DType::Int32, Device::cpu());
  Tensor joffsets = Tensor::empty({num_grids + 1}, DType::Int64, Device::cpu());
  int32_t* out = static_cast<int32_t*>(data.data());
  int64_t* out_offsets = static_cast<int64_t*>(joffsets.data());
  int64_t row = 0;
  for (int64_t b = 0; b < num_grids; ++b) {
    out_offsets[b] = row;
    for (int64_t p = offsets[b]; p < offsets[b + 1]; ++p)
      if (keep[p]) std::copy(xyz + 3 * p, xyz + 3 * p + 3, out + 3 * row++);
  }
  out_offsets[num_grids] = row;
  return GridBatch::from_ijk(JaggedTensor::from_trusted_offsets(data, joffsets), sizes, origins);
}

}  // namespace

GridBatch coarsened_grid(const GridBatch& grid, const Vec3i& factor, Stream stream) {
  return derived_grid("coarsened_grid", grid, {factor, factor, false, TapStart::AtOutput}, stream);
}

GridBatch refined_grid(const GridBatch& grid, const Vec3i& factor, Stream stream) {
  return derived_grid("refined_grid", grid, {factor, factor, true, TapStart::AtOutput}, stream);
}

GridBatch dual_grid(const GridBatch& grid, bool exclude_border, Stream stream) {
  constexpr const char* kOp = "dual_grid";
  if (!exclude_border)
    return derived_grid(kOp, grid, {{2, 2, 2}, {1, 1, 1}, true, TapStart::AtOutput}, stream);
  // map[t][o] = the row of voxel o + t for t in {0, 1}^3: o stays where all 8 are active.
  const ConvGeometry upper_octant{{2, 2, 2}, {1, 1, 1}, false, TapStart::AtOutput};
  const Tensor map = kernel_map(grid, grid, upper_octant, stream);
  const int64_t n = grid.total_voxels(), volume = upper_octant.kernel_volume();
  Tensor keep = Tensor::empty({n}, DType::Bool, grid.device(), stream);
  const int32_t* m = map.view().data_ptr<const int32_t>();
  bool* k = static_cast<bool*>(keep.data());
  if (grid.device().is_cuda()) {
#ifdef TILEGRID_WITH_CUDA
    cuda::all_taps_found(m, volume, n, k, grid.device().index, stream);
#endif
  } else {
    for (int64_t o = 0; o < n; ++o) {
      k[o] = true;
      for (int64_t t = 0; t < volume; ++t) k[o] = k[o] && m[t * n + o] >= 0;
    }
  }
  std::vector<Vec3d> origins = grid.origins();
  const std::vector<Vec3d>& sizes = grid.voxel_sizes();
  for (size_t b = 0; b < origins.size(); ++b)
    for (size_t a = 0; a < 3; ++a) origins[b][a] -= sizes[b][a] / 2;
  return kept(grid, k, sizes, origins, kOp, stream);
}

GridBatch dilated_grid(const GridBatch& grid, int64_t dilation, Stream stream) {
  TG_CHECK_VALUE(dilation >= 0 && dilation <= kMaxDilation,
                 "dilated_grid: dilation must be in [0, ", kMaxDilation, "], got ", dilation);
  const int32_t k = int32_t(2 * dilation + 1);
  return derived_grid("dilated_grid", grid, {{k, k, k}, {1, 1, 1}, false, TapStart::Centred},
                      stream);
}

GridBatch pruned_grid(const GridBatch& grid, const TensorView& mask, Stream stream) {
  constexpr const char* kOp = "pruned_grid";
  check_dtype(kOp, "mask", mask, {DType::Bool});
  check_shape(kOp, "mask", mask, {grid.total_voxels()});
  check_contiguous(kOp, "mask", mask);
  TG_CHECK_VALUE(mask.device == grid.device(), kOp, ": mask is on ", mask.device,
                 " but the grid is on ", grid.device());
  return kept(grid, mask.data_ptr<const bool>(), grid.voxel_sizes(), grid.origins(), kOp, stream);
}

}  // namespace tilegrid::grid
