#pragma once
// Helpers shared by the GridBatch constructors (internal).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda_copy.h"
#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

// One Vec3d per grid: `given` when it has one entry per grid (all finite, and > 0 where
// `positive`), `fallback` for every grid when `given` is empty.
inline std::vector<Vec3d> per_grid(const char* op, const std::vector<Vec3d>& given, int64_t grids,
                                   Vec3d fallback, const char* name, bool positive) {
  if (given.empty()) return std::vector<Vec3d>(size_t(grids), fallback);
  TG_CHECK_VALUE(int64_t(given.size()) == grids, op, ": ", name, " must have one entry per grid (",
                 grids, "), got ", int64_t(given.size()));
  for (const Vec3d& v : given)
    for (double x : v) {
      TG_CHECK_VALUE(std::isfinite(x), op, ": ", name, " must be finite, got ", x);
      TG_CHECK_VALUE(!positive || x > 0, op, ": ", name, " must be > 0, got ", x);
    }
  return given;
}

// Voxel sizes that the caller must give, one per grid, all > 0.
inline std::vector<Vec3d> required_voxel_sizes(const char* op, const std::vector<Vec3d>& given,
                                               int64_t grids) {
  TG_CHECK_VALUE(!given.empty() || grids == 0, op, ": voxel_sizes must have one entry per grid (",
                 grids, "), got 0");
  return per_grid(op, given, grids, {1, 1, 1}, "voxel_sizes", true);
}

inline std::vector<VoxelTransform> transforms_of(const std::vector<Vec3d>& voxel_sizes,
                                                 const std::vector<Vec3d>& origins) {
  std::vector<VoxelTransform> out;
  for (size_t b = 0; b < voxel_sizes.size(); ++b) {
    const Vec3d& s = voxel_sizes[b];
    const Vec3d& o = origins[b];
    out.push_back({{s[0], s[1], s[2]}, {o[0], o[1], o[2]}});
  }
  return out;
}

// Plain structs (tree nodes, transforms) as a uint8 host tensor.
template <class T>
Tensor to_bytes(const std::vector<T>& items) {
  Tensor t = Tensor::empty({int64_t(items.size() * sizeof(T))}, DType::UInt8, Device::cpu());
  if (!items.empty())
    std::copy_n(reinterpret_cast<const uint8_t*>(items.data()), items.size() * sizeof(T),
                static_cast<uint8_t*>(t.data()));
  return t;
}

// The same as a uint8 tensor on `device`. On a GPU, a few bytes (a batch's transforms) go in
// stream order without a wait (cuda::copy_small_to_device), so that deriving a grid does not
// wait for its transforms' upload.
template <class T>
Tensor to_bytes(const std::vector<T>& items, Device device, Stream stream) {
#ifdef TILEGRID_WITH_CUDA
  const size_t nbytes = items.size() * sizeof(T);
  if (device.is_cuda() && nbytes <= ::tilegrid::cuda::kSmallCopyBytes) {
    Tensor t = Tensor::empty({int64_t(nbytes)}, DType::UInt8, device, stream);
    ::tilegrid::cuda::copy_small_to_device(t.data(), items.data(), nbytes, device.index, stream);
    return t;
  }
#endif
  return to_bytes(items).to(device, stream);
}

}  // namespace tilegrid::grid
