#include "tilegrid/grid/grid_batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace tilegrid::grid {
namespace {

using Ijk = std::tuple<int32_t, int32_t, int32_t>;

JaggedTensor make_ijk(const std::vector<std::vector<Ijk>>& grids) {
  std::vector<int64_t> offsets{0};
  for (const auto& g : grids) offsets.push_back(offsets.back() + int64_t(g.size()));
  Tensor data = Tensor::empty({offsets.back(), 3}, DType::Int32, Device::cpu());
  Tensor joffsets = Tensor::empty({int64_t(offsets.size())}, DType::Int64, Device::cpu());
  int32_t* xyz = static_cast<int32_t*>(data.data());
  for (const auto& g : grids)
    for (const auto& [i, j, k] : g) {
      *xyz++ = i;
      *xyz++ = j;
      *xyz++ = k;
    }
  std::copy(offsets.begin(), offsets.end(), static_cast<int64_t*>(joffsets.data()));
  return JaggedTensor(data, joffsets);
}

// The documented row order, computed independently of the tree code: by upper-node origin
// (floor division by 4096), then the 32^3 position, the 16^3 position and the 8^3 position.
auto order_key(const Ijk& c) {
  // Plain variables, not a structured binding: lambdas capture those only from C++20 on, and
  // clang 14 does not implement that yet.
  const int32_t i = std::get<0>(c), j = std::get<1>(c), k = std::get<2>(c);
  auto fl = [](int32_t v, int s) { return v >> s; };  // arithmetic shift floors negatives
  auto pos = [&](int s, int n) {
    return ((fl(i, s) & (n - 1)) * n + (fl(j, s) & (n - 1))) * n + (fl(k, s) & (n - 1));
  };
  return std::make_tuple(fl(i, 12), fl(j, 12), fl(k, 12), pos(7, 32), pos(3, 16), pos(0, 8));
}

std::vector<std::vector<Ijk>> random_grids(int grids, int max_points, int32_t range) {
  std::uniform_int_distribution<int> count(0, max_points);
  std::uniform_int_distribution<int32_t> coord(-range, range);
  std::vector<std::vector<Ijk>> out(static_cast<size_t>(grids));
  for (auto& g : out) {
    const int n = count(testing::rng());
    for (int p = 0; p < n; ++p) {
      Ijk c{coord(testing::rng()), coord(testing::rng()), coord(testing::rng())};
      g.push_back(c);
      if (p % 3 == 0) g.push_back(c);  // duplicates must be merged
    }
  }
  if (grids > 2) out[1].clear();  // an empty grid inside the batch
  return out;
}

void expect_round_trip(const std::vector<std::vector<Ijk>>& grids) {
  GridBatch batch = GridBatch::from_ijk(make_ijk(grids));
  ASSERT_EQ(batch.num_grids(), int64_t(grids.size()));
  JaggedTensor active = batch.ijk();
  const int32_t* xyz = static_cast<const int32_t*>(active.jdata().data());
  int64_t row = 0;
  for (size_t b = 0; b < grids.size(); ++b) {
    std::set<Ijk> unique(grids[b].begin(), grids[b].end());
    std::vector<Ijk> expected(unique.begin(), unique.end());
    std::sort(expected.begin(), expected.end(),
              [](const Ijk& a, const Ijk& c) { return order_key(a) < order_key(c); });
    ASSERT_EQ(batch.num_voxels(int64_t(b)), int64_t(expected.size())) << "grid " << b;
    for (const Ijk& c : expected) {
      ASSERT_EQ(Ijk(xyz[3 * row], xyz[3 * row + 1], xyz[3 * row + 2]), c) << "row " << row;
      ++row;
    }
  }
  EXPECT_EQ(row, batch.total_voxels());

  // Every active voxel maps to its own row; the same coordinates moved by one (the lowest
  // bit of i flipped, which cannot overflow) are absent unless they are active too.
  Tensor index = batch.ijk_to_index(active);
  for (int64_t r = 0; r < batch.total_voxels(); ++r)
    ASSERT_EQ(static_cast<const int64_t*>(index.data())[r], r);
  std::vector<std::vector<Ijk>> shifted(grids.size());
  for (size_t b = 0; b < grids.size(); ++b)
    for (const auto& [i, j, k] : grids[b]) shifted[b].push_back({i ^ 1, j, k});
  Tensor shifted_index = batch.ijk_to_index(make_ijk(shifted));
  int64_t n = 0;
  for (size_t b = 0; b < grids.size(); ++b) {
    std::set<Ijk> unique(grids[b].begin(), grids[b].end());
    for (const Ijk& c : shifted[b]) {
      const int64_t got = static_cast<const int64_t*>(shifted_index.data())[n++];
      EXPECT_EQ(got >= 0, unique.count(c) > 0);
    }
  }
}

TEST(GridBatch, RandomCloudsWithDuplicatesNegativeAndLargeCoordinates) {
  expect_round_trip(random_grids(4, 3000, 1 << 20));
}

TEST(GridBatch, DenseNeighbourhoodsShareNodes) {
  expect_round_trip(random_grids(3, 5000, 40));
}

TEST(GridBatch, BatchOfSixtyFourGrids) {
  expect_round_trip(random_grids(64, 200, 300));
}

TEST(GridBatch, SingleGridAndExtremeCoordinates) {
  const int32_t big = 2147483647, small = -2147483647 - 1;
  expect_round_trip({{{big, big, big}, {small, small, small}, {0, 0, 0}, {-1, -1, -1}}});
}

// CachedLookup answers as index_of does along walks that stay in a leaf, cross leaves, leave
// the grid and jump far (its cache must not answer for another block), negative coordinates
// included.
TEST(GridBatch, CachedLookupAgreesWithIndexOf) {
  // Three grids of 4000 random voxels in [-12, 12]^3 (about a fifth of it active), and an
  // empty one.
  std::uniform_int_distribution<int32_t> in_box(-12, 12);
  std::vector<std::vector<Ijk>> grids(4);
  for (size_t g = 0; g < 3; ++g)
    for (int p = 0; p < 4000; ++p) grids[g].push_back({in_box(testing::rng()), in_box(testing::rng()), in_box(testing::rng())});
  GridBatch batch = GridBatch::from_ijk(make_ijk(grids));
  const TreeView tree = batch.view();
  std::uniform_int_distribution<int32_t> coord(-20, 20), step(-2, 2), jump(0, 9);
  int64_t active = 0;
  for (int64_t b = 0; b < batch.num_grids(); ++b) {
    CachedLookup lookup(tree, b);
    Coord c{coord(testing::rng()), coord(testing::rng()), coord(testing::rng())};
    for (int n = 0; n < 20000; ++n) {
      if (jump(testing::rng()) == 0)
        c = {coord(testing::rng()), coord(testing::rng()), coord(testing::rng())};
      else
        c = {std::clamp(c.i + step(testing::rng()), -14, 14), std::clamp(c.j + step(testing::rng()), -14, 14),
             std::clamp(c.k + step(testing::rng()), -14, 14)};  // steps stay near the voxels
      const int64_t want = tree.index_of(b, c);
      ASSERT_EQ(lookup.index_of(c), want) << "grid " << b << " at " << c.i << ", " << c.j << ", " << c.k;
      active += want >= 0;
    }
  }
  EXPECT_GT(active, 2000);  // the walks meet active voxels, not only empty space (about 8000)
}

// The same across node boundaries: clusters of voxels that straddle the 128^3 blocks of lower
// nodes (at 0 and +-128) and sit in different upper nodes (4096^3 blocks), walked in steps
// that cross those boundaries and in jumps between clusters, so that the lookup's cached
// lower node must be kept within a block and dropped at its edge.
TEST(GridBatch, CachedLookupAgreesWithIndexOfAcrossLowerAndUpperNodes) {
  const std::vector<Coord> centres = {{0, 0, 0}, {128, 0, 0}, {-128, 127, 0}, {127, -128, 255},
                                      {4096, 0, 0}, {-4097, 4095, -1}};
  std::uniform_int_distribution<int32_t> near(-10, 10), pick(0, int32_t(centres.size()) - 1);
  std::vector<std::vector<Ijk>> grids(2);
  for (auto& grid : grids)
    for (const Coord& c : centres)
      for (int p = 0; p < 1500; ++p)
        grid.push_back({c.i + near(testing::rng()), c.j + near(testing::rng()), c.k + near(testing::rng())});
  GridBatch batch = GridBatch::from_ijk(make_ijk(grids));
  const TreeView tree = batch.view();
  std::uniform_int_distribution<int32_t> step(-3, 3), jump(0, 19);
  int64_t active = 0;
  for (int64_t b = 0; b < batch.num_grids(); ++b) {
    CachedLookup lookup(tree, b);
    Coord c{0, 0, 0};
    for (int n = 0; n < 30000; ++n) {
      if (jump(testing::rng()) == 0) {
        const Coord& to = centres[pick(testing::rng())];
        c = {to.i + near(testing::rng()), to.j + near(testing::rng()), to.k + near(testing::rng())};
      } else {
        c = {c.i + step(testing::rng()), c.j + step(testing::rng()), c.k + step(testing::rng())};
      }
      const int64_t want = tree.index_of(b, c);
      ASSERT_EQ(lookup.index_of(c), want) << "grid " << b << " at " << c.i << ", " << c.j << ", " << c.k;
      active += want >= 0;
    }
  }
  EXPECT_GT(active, 3000);  // the walks meet active voxels, not only empty space
}

TEST(GridBatch, DenseBoxCostsUnderAThirdOfAByteAVoxel) {
  std::vector<Ijk> box;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j)
      for (int k = 0; k < 64; ++k) box.push_back({i, j, k});
  GridBatch batch = GridBatch::from_ijk(make_ijk({box}));
  EXPECT_EQ(batch.num_leaves(), 512);
  EXPECT_EQ(batch.num_lower_nodes(), 1);
  EXPECT_EQ(batch.num_upper_nodes(), 1);
  // 512 leaves of 120 bytes + one lower (792) and one upper (6 KB) node.
  EXPECT_LT(double(batch.tree_bytes()) / batch.total_voxels(), 0.3);
}

TEST(GridBatch, BadInputsGetClearErrors) {
  JaggedTensor ijk = make_ijk({{{0, 0, 0}}});
  EXPECT_THROW(GridBatch::from_ijk(ijk, {{1, 0, 1}}), ValueError);
  EXPECT_THROW(GridBatch::from_ijk(ijk, {{1, 1, 1}, {1, 1, 1}}), ValueError);
  Tensor wide = Tensor::empty({1, 4}, DType::Int32, Device::cpu());
  Tensor offsets = Tensor::empty({2}, DType::Int64, Device::cpu());
  static_cast<int64_t*>(offsets.data())[0] = 0;
  static_cast<int64_t*>(offsets.data())[1] = 1;
  EXPECT_THROW(GridBatch::from_ijk(JaggedTensor(wide, offsets)), ValueError);
  Tensor int64_ijk = Tensor::empty({1, 3}, DType::Int64, Device::cpu());
  EXPECT_THROW(GridBatch::from_ijk(JaggedTensor(int64_ijk, offsets)), TypeError);
  GridBatch two = GridBatch::from_ijk(make_ijk({{{0, 0, 0}}, {{1, 1, 1}}}));
  EXPECT_THROW(two.ijk_to_index(ijk), ValueError);  // 1 tensor for 2 grids
}

}  // namespace
}  // namespace tilegrid::grid
