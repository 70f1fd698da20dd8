#pragma once
// Random grid batches and features shared by the .nvdb tests (ours and the NanoVDB interop
// test): empty grids, negative and extreme coordinates, per-grid transforms, features of
// every dtype with per-voxel shapes from scalars to 2-D blocks.
#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid::testing {

using ::tilegrid::testing::rng;

// One random grid per entry of `counts` (0 gives an empty grid), coordinates drawn within
// +-range around a random centre, with a few extreme coordinates mixed in.
inline GridBatch random_batch(const std::vector<int>& counts, int32_t range, bool extremes) {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> xyz;
  std::uniform_int_distribution<int32_t> offset(-range, range);
  std::uniform_int_distribution<int32_t> centre(-(1 << 24), 1 << 24);
  for (int n : counts) {
    const int32_t c[3] = {centre(rng()), centre(rng()), centre(rng())};
    for (int p = 0; p < n; ++p)
      for (int a = 0; a < 3; ++a) xyz.push_back(c[a] + offset(rng()));
    if (extremes && n > 0) {
      const int32_t big = 2147483647, small = -2147483647 - 1;
      xyz.insert(xyz.end(), {big, big, big, small, small, small, big, small, -1, 0, 0, 0});
    }
    offsets.push_back(int64_t(xyz.size() / 3));
  }
  Tensor data = Tensor::empty({offsets.back(), 3}, DType::Int32, Device::cpu());
  Tensor joffsets = Tensor::empty({int64_t(offsets.size())}, DType::Int64, Device::cpu());
  std::copy(xyz.begin(), xyz.end(), static_cast<int32_t*>(data.data()));
  std::copy(offsets.begin(), offsets.end(), static_cast<int64_t*>(joffsets.data()));
  std::uniform_real_distribution<double> size(0.01, 3.0), origin(-100.0, 100.0);
  std::vector<Vec3d> sizes, origins;
  for (size_t b = 0; b < counts.size(); ++b) {
    sizes.push_back({size(rng()), size(rng()), size(rng())});
    origins.push_back({origin(rng()), origin(rng()), origin(rng())});
  }
  return GridBatch::from_ijk(JaggedTensor(data, joffsets), sizes, origins);
}

// Random bytes (0/1 for bool), so that a round trip can be compared byte for byte.
inline Tensor random_feature(int64_t rows, const std::vector<int64_t>& row_shape, DType dtype) {
  Shape shape{rows};
  for (int64_t d : row_shape) shape.push_back(d);
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  std::uniform_int_distribution<int> byte(0, 255);
  unsigned char* p = static_cast<unsigned char*>(t.data());
  for (size_t n = 0; n < t.view().nbytes(); ++n)
    p[n] = static_cast<unsigned char>(dtype == DType::Bool ? byte(rng()) & 1 : byte(rng()));
  return t;
}

// A fresh path in the temporary folder, removed when the object goes.
struct TempFile {
  std::filesystem::path path;
  TempFile() {
    std::uniform_int_distribution<uint64_t> id;
    path = std::filesystem::temp_directory_path() /
           ("tilegrid_nvdb_" + std::to_string(id(rng())) + ".nvdb");
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string str() const { return path.string(); }
};

}  // namespace tilegrid::grid::testing
