// NanoVDB reads what save_nvdb writes: files are opened with NanoVDB's own io reader (built
// against the installed NanoVDB 32.4 headers, the format we write) and checked with its
// validator, its index accessor and its channel accessor; and NanoVDB's writer, given the grids
// it read, writes back the same bytes, which load_nvdb reads.
#include <gtest/gtest.h>

#include <nanovdb/NanoVDB.h>
#include <nanovdb/util/GridBuilder.h>
#include <nanovdb/util/GridValidator.h>
#include <nanovdb/util/IO.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "grid/nvdb_test_batches.h"
#include "tilegrid/grid/nvdb_io.h"

namespace tilegrid::grid {
namespace {

using testing::random_batch;
using testing::random_feature;
using testing::TempFile;
using ::tilegrid::testing::rng;

static_assert(NANOVDB_MAJOR_VERSION_NUMBER == 32 && NANOVDB_MINOR_VERSION_NUMBER == 4,
              "save_nvdb writes the NanoVDB 32.4 format; build this test against those headers");

using IndexGrid = nanovdb::NanoGrid<nanovdb::ValueIndex>;

struct Saved {
  GridBatch grid = random_batch({3000, 0, 700, 1, 4000}, 100, true);
  std::vector<Tensor> features{random_feature(grid.total_voxels(), {}, DType::Float32),
                               random_feature(grid.total_voxels(), {3}, DType::Float64),
                               random_feature(grid.total_voxels(), {}, DType::Int32)};
  std::vector<std::string> names{"dense part", "empty", "grid_2", "single voxel", "last"};
  TempFile file;
  Saved() { save_nvdb(file.str(), grid, features, names, NvdbFormat::V32_4); }
};

const int32_t* ijk_rows(const GridBatch& grid, Tensor& keep) {
  keep = grid.ijk().jdata();
  return static_cast<const int32_t*>(keep.data());
}

TEST(NvdbInterop, FileRecordsMatchTheBatch) {
  const Saved s;
  const std::vector<nanovdb::io::GridMetaData> meta = nanovdb::io::readGridMetaData(s.file.str());
  ASSERT_EQ(int64_t(meta.size()), s.grid.num_grids());
  for (size_t b = 0; b < meta.size(); ++b) {
    EXPECT_EQ(meta[b].gridName, s.names[b]);
    EXPECT_EQ(meta[b].voxelCount, uint64_t(s.grid.num_voxels(int64_t(b))));
    EXPECT_EQ(meta[b].gridType, nanovdb::GridType::Index);
    EXPECT_EQ(meta[b].gridClass, nanovdb::GridClass::IndexGrid);
    EXPECT_EQ(meta[b].codec, nanovdb::io::Codec::NONE);
  }
  EXPECT_TRUE(nanovdb::io::hasGrid(s.file.str(), "single voxel"));
  nanovdb::GridHandle<> by_name = nanovdb::io::readGrid(s.file.str(), "last");
  ASSERT_TRUE(by_name.grid<nanovdb::ValueIndex>());
  EXPECT_EQ(by_name.grid<nanovdb::ValueIndex>()->activeVoxelCount(),
            uint64_t(s.grid.num_voxels(4)));
}

TEST(NvdbInterop, IndexAccessorReturnsOurRowPlusOneAndZeroForInactiveVoxels) {
  const Saved s;
  const std::vector<nanovdb::GridHandle<>> handles = nanovdb::io::readGrids(s.file.str());
  ASSERT_EQ(int64_t(handles.size()), s.grid.num_grids());
  Tensor keep;
  const int32_t* xyz = ijk_rows(s.grid, keep);
  const int64_t* offsets = static_cast<const int64_t*>(s.grid.voxel_offsets().data());
  for (int64_t b = 0; b < s.grid.num_grids(); ++b) {
    SCOPED_TRACE("grid " + std::to_string(b));
    const IndexGrid* grid = handles[size_t(b)].grid<nanovdb::ValueIndex>();
    ASSERT_NE(grid, nullptr) << "not read back as an index grid";
    EXPECT_TRUE(nanovdb::isValid(*grid, /*detailed=*/true, /*verbose=*/true));
    EXPECT_EQ(grid->checksum() >> 32, 0xffffffffu) << "a partial (header) checksum is written";
    EXPECT_TRUE(nanovdb::validateChecksum(*grid, nanovdb::ChecksumMode::Partial));
    EXPECT_EQ(std::string(grid->gridName()), s.names[size_t(b)]);
    EXPECT_TRUE(grid->isGridIndex());
    EXPECT_TRUE(grid->isBreadthFirst());
    EXPECT_EQ(grid->activeVoxelCount(), uint64_t(s.grid.num_voxels(b)));
    EXPECT_EQ(grid->valueCount(), uint64_t(s.grid.num_voxels(b)) + 1)
        << "index 0 is the background";

    auto accessor = grid->getAccessor();
    nanovdb::CoordBBox box;
    for (int64_t r = offsets[b]; r < offsets[b + 1]; ++r) {
      const nanovdb::Coord ijk(xyz[3 * r], xyz[3 * r + 1], xyz[3 * r + 2]);
      box.expand(ijk);
      ASSERT_TRUE(accessor.isActive(ijk)) << "row " << r;
      ASSERT_EQ(accessor.getValue(ijk), uint64_t(r - offsets[b] + 1)) << "row " << r;
      ASSERT_EQ(grid->tree().getValue(ijk), uint64_t(r - offsets[b] + 1)) << "row " << r;
    }
    // Inactive voxels: neighbours of active ones (mostly in the same leaf) and random ones.
    std::vector<int32_t> probes;
    std::uniform_int_distribution<int32_t> any(-2147483647 - 1, 2147483647);
    for (int64_t r = offsets[b]; r < offsets[b + 1]; ++r)
      probes.insert(probes.end(), {xyz[3 * r] ^ 1, xyz[3 * r + 1], xyz[3 * r + 2]});
    for (int n = 0; n < 1000; ++n)
      probes.insert(probes.end(), {any(rng()), any(rng()), any(rng())});
    Tensor probe_ijk = Tensor::empty({int64_t(probes.size() / 3), 3}, DType::Int32, Device::cpu());
    std::copy(probes.begin(), probes.end(), static_cast<int32_t*>(probe_ijk.data()));
    Tensor probe_offsets =
        Tensor::empty({int64_t(s.grid.num_grids() + 1)}, DType::Int64, Device::cpu());
    for (int64_t g = 0; g <= s.grid.num_grids(); ++g)
      static_cast<int64_t*>(probe_offsets.data())[g] = g <= b ? 0 : probe_ijk.shape()[0];
    const Tensor rows = s.grid.ijk_to_index(JaggedTensor(probe_ijk, probe_offsets));
    int64_t inactive = 0;
    for (int64_t p = 0; p < probe_ijk.shape()[0]; ++p) {
      const nanovdb::Coord ijk(probes[size_t(3 * p)], probes[size_t(3 * p + 1)],
                               probes[size_t(3 * p + 2)]);
      const int64_t row = static_cast<const int64_t*>(rows.data())[p];
      const uint64_t expected = row < 0 ? 0 : uint64_t(row - offsets[b] + 1);
      ASSERT_EQ(accessor.getValue(ijk), expected) << ijk[0] << " " << ijk[1] << " " << ijk[2];
      ASSERT_EQ(accessor.isActive(ijk), row >= 0);
      inactive += row < 0;
    }
    EXPECT_GT(inactive, 900);

    if (s.grid.num_voxels(b) > 0) {
      EXPECT_EQ(grid->indexBBox(), box);
      // World bbox: NanoVDB's convention maps the index bbox's min and max + 1.
      const Vec3d& size = s.grid.voxel_sizes()[size_t(b)];
      const Vec3d& origin = s.grid.origins()[size_t(b)];
      for (int a = 0; a < 3; ++a) {
        EXPECT_NEAR(grid->worldBBox()[0][a], origin[a] + size[a] * box[0][a],
                    1e-6 * std::abs(size[a] * box[0][a]) + 1e-9);
        EXPECT_NEAR(grid->worldBBox()[1][a], origin[a] + size[a] * (box[1][a] + 1.0),
                    1e-6 * std::abs(size[a] * box[1][a]) + 1e-9);
      }
    } else {
      EXPECT_TRUE(grid->isEmpty());
    }
  }
}

TEST(NvdbInterop, MapIsOurTransform) {
  const Saved s;
  const std::vector<nanovdb::GridHandle<>> handles = nanovdb::io::readGrids(s.file.str());
  for (int64_t b = 0; b < s.grid.num_grids(); ++b) {
    const IndexGrid* grid = handles[size_t(b)].grid<nanovdb::ValueIndex>();
    const VoxelTransform t = s.grid.transform(b);
    for (int a = 0; a < 3; ++a) EXPECT_DOUBLE_EQ(grid->voxelSize()[a], t.voxel_size[a]);
    const double ijk[3] = {-17, 4, 123456};
    double world[3];
    t.voxel_to_world(ijk, world);
    const nanovdb::Vec3d got = grid->indexToWorld(nanovdb::Vec3d(ijk[0], ijk[1], ijk[2]));
    const nanovdb::Vec3d back = grid->worldToIndex(got);
    for (int a = 0; a < 3; ++a) {
      EXPECT_NEAR(got[a], world[a], 1e-9 * std::abs(world[a]) + 1e-12);
      EXPECT_NEAR(back[a], ijk[a], 1e-6);
    }
  }
}

TEST(NvdbInterop, ChannelsAreBlindDataNanoVdbAccessorsRead) {
  const Saved s;
  const std::vector<nanovdb::GridHandle<>> handles = nanovdb::io::readGrids(s.file.str());
  Tensor keep;
  const int32_t* xyz = ijk_rows(s.grid, keep);
  const int64_t* offsets = static_cast<const int64_t*>(s.grid.voxel_offsets().data());
  const float* f0 = static_cast<const float*>(s.features[0].data());
  const double* f1 = static_cast<const double*>(s.features[1].data());
  const int32_t* f2 = static_cast<const int32_t*>(s.features[2].data());
  for (int64_t b = 0; b < s.grid.num_grids(); ++b) {
    SCOPED_TRACE("grid " + std::to_string(b));
    const IndexGrid* grid = handles[size_t(b)].grid<nanovdb::ValueIndex>();
    ASSERT_EQ(grid->blindDataCount(), 3u);
    const uint64_t n = uint64_t(s.grid.num_voxels(b)) + 1;
    const struct {
      const char* name;
      nanovdb::GridType type;
      uint64_t count;
    } expected[3] = {{"feature_0:float32[]", nanovdb::GridType::Float, n},
                     {"feature_1:float64[3]", nanovdb::GridType::Double, 3 * n},
                     {"feature_2:int32[]", nanovdb::GridType::Int32, n}};
    for (uint32_t k = 0; k < 3; ++k) {
      const nanovdb::GridBlindMetaData& meta = grid->blindMetaData(k);
      EXPECT_STREQ(meta.mName, expected[k].name);
      EXPECT_EQ(meta.mDataType, expected[k].type);
      EXPECT_EQ(meta.mElementCount, expected[k].count);
      EXPECT_EQ(meta.mDataClass, nanovdb::GridBlindDataClass::ChannelArray);
    }
    nanovdb::ChannelAccessor<const float> channel0(*grid, 0u);
    nanovdb::ChannelAccessor<const int32_t> channel2(*grid, 2u);
    const double* channel1 = static_cast<const double*>(grid->blindData(1));
    for (int64_t r = offsets[b]; r < offsets[b + 1]; ++r) {
      const nanovdb::Coord ijk(xyz[3 * r], xyz[3 * r + 1], xyz[3 * r + 2]);
      ASSERT_EQ(std::memcmp(&channel0(ijk), f0 + r, sizeof(float)), 0) << "row " << r;
      ASSERT_EQ(channel2(ijk), f2[r]) << "row " << r;
      const uint64_t index = channel0.getIndex(ijk);
      ASSERT_EQ(std::memcmp(channel1 + 3 * index, f1 + 3 * r, 3 * sizeof(double)), 0)
          << "row " << r;
    }
    EXPECT_EQ(channel0(nanovdb::Coord(-2147483647 - 1, 5, 5)), 0.0f) << "background row is zero";
  }
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream is(path, std::ios::binary | std::ios::ate);
  std::vector<char> bytes(size_t(is.tellg()));
  is.seekg(0).read(bytes.data(), std::streamsize(bytes.size()));
  return bytes;
}

TEST(NvdbInterop, NanoVdbWritesBackTheSameBytesAndWeReadThem) {
  const Saved s;
  const std::vector<nanovdb::GridHandle<>> handles = nanovdb::io::readGrids(s.file.str());
  TempFile again;
  nanovdb::io::writeGrids(again.str(), handles);
  EXPECT_EQ(file_bytes(again.str()), file_bytes(s.file.str()));
  const NvdbContents back = load_nvdb(again.str());
  ASSERT_EQ(back.grid.num_grids(), s.grid.num_grids());
  EXPECT_EQ(back.names, s.names);
  ASSERT_EQ(back.features.size(), 3u);
  EXPECT_EQ(
      std::memcmp(back.features[1].data(), s.features[1].data(), s.features[1].view().nbytes()), 0);
}

// A grid of values (NanoVDB's usual kind) loads as its active voxels with the values as one
// feature: here Float and Vec3f grids built by NanoVDB 32.4 itself, voxels in three leaves and
// two upper nodes.
TEST(NvdbInterop, GridsOfValuesLoadTheirValuesAsAFeature) {
  const std::vector<Coord> voxels = {{1, 2, 3}, {9, 2, 3}, {-4097, 5, 6}, {1, 2, 4}};
  auto value = [](const Coord& c) { return float(c.i) + 0.5f * float(c.j) + 0.25f * float(c.k); };
  nanovdb::GridBuilder<float> scalars(0.0f);
  nanovdb::GridBuilder<nanovdb::Vec3f> vectors(nanovdb::Vec3f(0.0f));
  auto s = scalars.getAccessor();
  auto v = vectors.getAccessor();
  for (const Coord& c : voxels) {
    s.setValue(nanovdb::Coord(c.i, c.j, c.k), value(c));
    v.setValue(nanovdb::Coord(c.i, c.j, c.k), nanovdb::Vec3f(value(c), -value(c), 2.0f));
  }
  for (int vector = 0; vector < 2; ++vector) {
    TempFile file;
    if (vector)
      nanovdb::io::writeGrid(file.str(), vectors.getHandle<>(0.5, nanovdb::Vec3d(1, 2, 3), "v"));
    else
      nanovdb::io::writeGrid(file.str(), scalars.getHandle<>(0.5, nanovdb::Vec3d(1, 2, 3), "s"));
    const NvdbContents loaded = load_nvdb(file.str());
    ASSERT_EQ(loaded.grid.total_voxels(), int64_t(voxels.size()));
    ASSERT_EQ(loaded.features.size(), 1u);
    const Tensor& f = loaded.features[0];
    EXPECT_EQ(f.dtype(), DType::Float32);
    EXPECT_EQ(f.shape(), (vector ? Shape{4, 3} : Shape{4}));
    const Tensor ijk = loaded.grid.ijk().jdata();
    const auto* p = static_cast<const int32_t*>(ijk.data());
    const auto* x = static_cast<const float*>(f.data());
    for (int64_t n = 0; n < 4; ++n) {
      const Coord c{p[3 * n], p[3 * n + 1], p[3 * n + 2]};
      const float want = value(c);
      EXPECT_EQ(x[vector ? 3 * n : n], want) << "voxel " << c.i << " " << c.j << " " << c.k;
      if (vector) EXPECT_EQ(x[3 * n + 1], -want);
    }
  }
}

TEST(NvdbInterop, GridsOfOtherTypesAreRefusedClearly) {
  nanovdb::GridBuilder<uint32_t> builder(0u);  // no uint32 dtype in tilegrid
  auto acc = builder.getAccessor();
  acc.setValue(nanovdb::Coord(1, 2, 3), 7u);
  TempFile file;
  nanovdb::io::writeGrid(file.str(), builder.getHandle<>(0.5, nanovdb::Vec3d(0), "counts"));
  try {
    load_nvdb(file.str());
    ADD_FAILURE() << "a uint32 grid was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("GridType 10; tilegrid reads index grids"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tilegrid::grid
