// The derived grids' C++ API (derived.h): each against its definition evaluated here over sets
// of coordinates, grid by grid (a batch of three, one of them empty), with the voxel sizes and
// origins fVDB gives; argument errors; and on a GPU, each equal to the CPU's voxel for voxel.
#include "tilegrid/grid/derived.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace tilegrid::grid {
namespace {

using Ijk = std::tuple<int32_t, int32_t, int32_t>;
using Sets = std::vector<std::set<Ijk>>;

// Grids of n random voxels in [-range, range]^3 each (n = 0 gives an empty grid), voxel sizes
// and origins that differ per grid and per axis.
GridBatch random_batch(const std::vector<int>& counts, int32_t range) {
  std::uniform_int_distribution<int32_t> coord(-range, range);
  int64_t total = 0;
  for (int n : counts) total += n;
  Tensor data = Tensor::empty({total, 3}, DType::Int32, Device::cpu());
  Tensor offsets = Tensor::empty({int64_t(counts.size()) + 1}, DType::Int64, Device::cpu());
  int32_t* xyz = static_cast<int32_t*>(data.data());
  int64_t* off = static_cast<int64_t*>(offsets.data());
  for (int64_t e = 0; e < 3 * total; ++e) xyz[e] = coord(testing::rng());
  off[0] = 0;
  std::vector<Vec3d> sizes, origins;
  for (size_t b = 0; b < counts.size(); ++b) {
    off[b + 1] = off[b] + counts[b];
    sizes.push_back({0.5 + double(b), 1.0, 0.25});
    origins.push_back({double(b), -1.5, 2.0});
  }
  return GridBatch::from_ijk(JaggedTensor(data, offsets), sizes, origins);
}

// Each grid's coordinates, of the rows where keep_row holds (all rows without it).
Sets sets_of(const GridBatch& grid, const std::function<bool(int64_t)>& keep_row = nullptr) {
  const GridBatch g = grid.to(Device::cpu());
  const JaggedTensor ijk = g.ijk();
  const int32_t* xyz = static_cast<const int32_t*>(ijk.jdata().data());
  const int64_t* off = static_cast<const int64_t*>(g.voxel_offsets().data());
  Sets out(size_t(g.num_grids()));
  for (int64_t b = 0; b < g.num_grids(); ++b)
    for (int64_t r = off[b]; r < off[b + 1]; ++r)
      if (!keep_row || keep_row(r))
        out[size_t(b)].emplace(xyz[3 * r], xyz[3 * r + 1], xyz[3 * r + 2]);
  return out;
}

// Every coordinate of every grid mapped to the coordinates `f` gives it.
Sets each_to(const Sets& in, const std::function<std::vector<Ijk>(const Ijk&)>& f) {
  Sets out(in.size());
  for (size_t b = 0; b < in.size(); ++b)
    for (const Ijk& c : in[b])
      for (const Ijk& d : f(c)) out[b].insert(d);
  return out;
}

int32_t floor_div(int32_t a, int32_t b) {
  return int32_t(std::floor(double(a) / double(b)));
}

void expect_transforms(const GridBatch& g, const GridBatch& from, const Vec3d& size_scale,
                       const Vec3d& origin_shift_in_source_voxels) {
  for (int64_t b = 0; b < g.num_grids(); ++b)
    for (size_t a = 0; a < 3; ++a) {
      const double s = from.voxel_sizes()[size_t(b)][a];
      EXPECT_DOUBLE_EQ(g.voxel_sizes()[size_t(b)][a], s * size_scale[a]);
      EXPECT_DOUBLE_EQ(g.origins()[size_t(b)][a],
                       from.origins()[size_t(b)][a] + origin_shift_in_source_voxels[a] * s);
    }
}

const std::vector<int> kCounts{300, 0, 120};

TEST(DerivedGrids, CoarsenedGridHoldsEachVoxelsParentAtTheBlocksCentre) {
  const GridBatch grid = random_batch(kCounts, 12);
  const GridBatch coarse = coarsened_grid(grid, {2, 3, 1});
  EXPECT_EQ(sets_of(coarse), each_to(sets_of(grid), [](const Ijk& c) {
              return std::vector<Ijk>{{floor_div(std::get<0>(c), 2), floor_div(std::get<1>(c), 3),
                                       std::get<2>(c)}};
            }));
  expect_transforms(coarse, grid, {2, 3, 1}, {0.5, 1.0, 0.0});
}

TEST(DerivedGrids, RefinedGridHoldsEveryChildAtTheFirstChildsCentre) {
  const GridBatch grid = random_batch(kCounts, 12);
  const GridBatch fine = refined_grid(grid, {2, 1, 3});
  EXPECT_EQ(sets_of(fine), each_to(sets_of(grid), [](const Ijk& c) {
              std::vector<Ijk> out;
              for (int32_t di = 0; di < 2; ++di)
                for (int32_t dk = 0; dk < 3; ++dk)
                  out.emplace_back(2 * std::get<0>(c) + di, std::get<1>(c), 3 * std::get<2>(c) + dk);
              return out;
            }));
  // Origin moved by -(f - 1) / (2 f) source voxels.
  expect_transforms(fine, grid, {0.5, 1.0, 1.0 / 3}, {-0.25, 0.0, -1.0 / 3});
}

TEST(DerivedGrids, DualGridHoldsEveryCornerOrOnlyThoseOfFullBlocks) {
  const GridBatch grid = random_batch(kCounts, 2);  // dense enough for full 2x2x2 blocks
  const Sets primal = sets_of(grid);
  const auto corners = [](const Ijk& c) {
    std::vector<Ijk> out;
    for (int32_t d = 0; d < 8; ++d)
      out.emplace_back(std::get<0>(c) + (d >> 2), std::get<1>(c) + ((d >> 1) & 1),
                       std::get<2>(c) + (d & 1));
    return out;
  };
  const GridBatch dual = dual_grid(grid);
  EXPECT_EQ(sets_of(dual), each_to(primal, corners));
  expect_transforms(dual, grid, {1, 1, 1}, {-0.5, -0.5, -0.5});

  Sets full(primal.size());
  for (size_t b = 0; b < primal.size(); ++b)
    for (const Ijk& c : primal[b]) {
      bool all = true;
      for (const Ijk& n : corners(c)) all = all && primal[b].count(n) > 0;
      if (all) full[b].insert(c);
    }
  size_t kept = 0;
  for (const auto& s : full) kept += s.size();
  ASSERT_GT(kept, 0u) << "the test grid holds no full 2x2x2 block";
  const GridBatch inner = dual_grid(grid, /*exclude_border=*/true);
  EXPECT_EQ(sets_of(inner), full);
  expect_transforms(inner, grid, {1, 1, 1}, {-0.5, -0.5, -0.5});
}

TEST(DerivedGrids, DilatedGridHoldsEveryVoxelWithinTheDilation) {
  const GridBatch grid = random_batch(kCounts, 12);
  for (int64_t n : {0, 2}) {
    const GridBatch grown = dilated_grid(grid, n);
    EXPECT_EQ(sets_of(grown), each_to(sets_of(grid), [n](const Ijk& c) {
                std::vector<Ijk> out;
                for (int32_t i = -int32_t(n); i <= n; ++i)
                  for (int32_t j = -int32_t(n); j <= n; ++j)
                    for (int32_t k = -int32_t(n); k <= n; ++k)
                      out.emplace_back(std::get<0>(c) + i, std::get<1>(c) + j, std::get<2>(c) + k);
                return out;
              }));
    expect_transforms(grown, grid, {1, 1, 1}, {0, 0, 0});
  }
}

// Every other voxel of each grid kept, by row.
Tensor alternate_mask(int64_t n) {
  Tensor mask = Tensor::empty({n}, DType::Bool, Device::cpu());
  for (int64_t r = 0; r < n; ++r) static_cast<bool*>(mask.data())[r] = r % 2 == 0;
  return mask;
}

TEST(DerivedGrids, PrunedGridKeepsTheMaskedVoxelsInTheirGrids) {
  const GridBatch grid = random_batch(kCounts, 12);
  const Tensor mask = alternate_mask(grid.total_voxels());
  const GridBatch pruned = pruned_grid(grid, mask.view());
  EXPECT_EQ(sets_of(pruned), sets_of(grid, [](int64_t r) { return r % 2 == 0; }));
  expect_transforms(pruned, grid, {1, 1, 1}, {0, 0, 0});
}

TEST(DerivedGrids, BadArgumentsSayWhatWasExpected) {
  const GridBatch grid = random_batch({50}, 4);
  const auto message = [](auto&& f) { return testing::error_message(f); };
  EXPECT_NE(message([&] { coarsened_grid(grid, {0, 2, 2}); })
                .find("coarsened_grid: factor must be in [1, 1048576]"),
            std::string::npos);
  EXPECT_NE(message([&] { dilated_grid(grid, -1); })
                .find("dilated_grid: dilation must be in [0, 524287], got -1"),
            std::string::npos);
  // ~50 voxels x 1290^3 children pass 2^31 - 1 before any is made.
  EXPECT_NE(message([&] { refined_grid(grid, {1290, 1290, 1290}); })
                .find("refined_grid: " + std::to_string(grid.total_voxels()) +
                      " voxels x 2146689000 offsets each would make more than"),
            std::string::npos);
  const Tensor ints = Tensor::empty({grid.total_voxels()}, DType::Int32, Device::cpu());
  EXPECT_NE(message([&] { pruned_grid(grid, ints.view()); }).find("pruned_grid"),
            std::string::npos);
  const Tensor short_mask = alternate_mask(grid.total_voxels() - 1);
  EXPECT_NE(message([&] { pruned_grid(grid, short_mask.view()); }).find("mask"),
            std::string::npos);
}

// On the GPU each derived grid is the CPU's: the same voxels in the same rows, grid by grid.
TEST(DerivedGrids, CudaDerivedGridsEqualTheCpu) {
  TG_SKIP_WITHOUT_GPU();
  const GridBatch cpu = random_batch({3000, 0, 800}, 9);
  const GridBatch gpu = cpu.to(Device::cuda(0));
  const auto same = [](const GridBatch& c, const GridBatch& g) {
    ASSERT_TRUE(g.device().is_cuda());
    const GridBatch back = g.to(Device::cpu());
    ASSERT_EQ(back.total_voxels(), c.total_voxels());
    const JaggedTensor a = c.ijk(), b = back.ijk();
    EXPECT_EQ(std::memcmp(a.jdata().data(), b.jdata().data(), size_t(3 * c.total_voxels()) * 4), 0);
    EXPECT_EQ(std::memcmp(c.voxel_offsets().data(), back.voxel_offsets().data(),
                          size_t(c.num_grids() + 1) * 8),
              0);
    EXPECT_EQ(c.voxel_sizes(), back.voxel_sizes());
    EXPECT_EQ(c.origins(), back.origins());
  };
  same(coarsened_grid(cpu, {2, 2, 3}), coarsened_grid(gpu, {2, 2, 3}));
  same(refined_grid(cpu, {2, 3, 1}), refined_grid(gpu, {2, 3, 1}));
  same(dual_grid(cpu), dual_grid(gpu));
  same(dual_grid(cpu, true), dual_grid(gpu, true));
  same(dilated_grid(cpu, 1), dilated_grid(gpu, 1));
  const Tensor mask = alternate_mask(cpu.total_voxels());
  const Tensor mask_gpu = mask.to(Device::cuda(0));
  same(pruned_grid(cpu, mask.view()), pruned_grid(gpu, mask_gpu.view()));
  const Tensor all_off = Tensor::empty({cpu.total_voxels()}, DType::Bool, Device::cpu());
  std::memset(all_off.data(), 0, size_t(cpu.total_voxels()));
  const Tensor all_off_gpu = all_off.to(Device::cuda(0));
  same(pruned_grid(cpu, all_off.view()), pruned_grid(gpu, all_off_gpu.view()));
  EXPECT_NE(testing::error_message([&] { pruned_grid(gpu, mask.view()); })
                .find("pruned_grid: mask is on cpu but the grid is on cuda"),
            std::string::npos);
}

}  // namespace
}  // namespace tilegrid::grid
