#include "tilegrid/grid/nvdb_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "grid/io/nvdb_codecs.h"
#include "grid/io/nvdb_layout.h"
#include "grid/nvdb_test_batches.h"

namespace tilegrid::grid {
namespace {

using testing::random_batch;
using testing::random_feature;
using testing::TempFile;

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream is(path, std::ios::binary | std::ios::ate);
  std::vector<char> bytes(size_t(is.tellg()));
  is.seekg(0).read(bytes.data(), std::streamsize(bytes.size()));
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  os.write(bytes.data(), std::streamsize(bytes.size()));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.numel() == 0 || std::memcmp(a.data(), b.data(), a.view().nbytes()) == 0);
}

void expect_same_grids(const GridBatch& a, const GridBatch& b) {
  ASSERT_EQ(a.num_grids(), b.num_grids());
  for (int64_t g = 0; g < a.num_grids(); ++g) {
    EXPECT_EQ(a.num_voxels(g), b.num_voxels(g)) << "grid " << g;
    EXPECT_EQ(a.voxel_sizes()[size_t(g)], b.voxel_sizes()[size_t(g)]) << "grid " << g;
    EXPECT_EQ(a.origins()[size_t(g)], b.origins()[size_t(g)]) << "grid " << g;
  }
  EXPECT_TRUE(same_bytes(a.ijk().jdata(), b.ijk().jdata())) << "active voxels or their order";
}

// Some features of every dtype, with scalar and multi-dimensional rows.
std::vector<Tensor> features_of_every_dtype(int64_t rows) {
  return {random_feature(rows, {}, DType::Float32),   random_feature(rows, {3}, DType::Float64),
          random_feature(rows, {2, 2}, DType::Int64), random_feature(rows, {}, DType::Int32),
          random_feature(rows, {4}, DType::Float16),  random_feature(rows, {5}, DType::BFloat16),
          random_feature(rows, {1}, DType::UInt8),    random_feature(rows, {}, DType::Bool),
          random_feature(rows, {0}, DType::Float32)};
}

void expect_round_trip_in(const GridBatch& grid, const std::vector<Tensor>& features,
                          const std::vector<std::string>& names, NvdbFormat format) {
  TempFile file;
  save_nvdb(file.str(), grid, features, names, format);
  const NvdbContents back = load_nvdb(file.str());
  expect_same_grids(grid, back.grid);
  ASSERT_EQ(back.features.size(), features.size());
  for (size_t k = 0; k < features.size(); ++k)
    EXPECT_TRUE(same_bytes(features[k], back.features[k]))
        << "feature " << k << " (" << features[k].dtype() << ", shape " << features[k].shape()
        << ") came back as " << back.features[k].dtype() << " " << back.features[k].shape();
  ASSERT_EQ(back.names.size(), size_t(grid.num_grids()));
  for (int64_t g = 0; g < grid.num_grids(); ++g)
    EXPECT_EQ(back.names[size_t(g)],
              names.empty() ? "grid_" + std::to_string(g) : names[size_t(g)]);
}

// Saved in both formats (NanoVDB 32.4 and 32.9), each loads back as it was.
void expect_round_trip(const GridBatch& grid, const std::vector<Tensor>& features,
                       const std::vector<std::string>& names) {
  for (const NvdbFormat format : {NvdbFormat::V32_4, NvdbFormat::V32_9}) {
    SCOPED_TRACE(format == NvdbFormat::V32_4 ? "NanoVDB 32.4" : "NanoVDB 32.9");
    expect_round_trip_in(grid, features, names, format);
  }
}

TEST(NvdbIo, RoundTripsRandomBatchesWithFeaturesOfEveryDtype) {
  // Dense clusters (a few nodes, many voxels a leaf) and sparse ones (a node per voxel or
  // two: 33 KB a lower node keeps these small), each with extreme coordinates added.
  for (const int32_t range : {40, 2000}) {
    const GridBatch grid = random_batch({2000, 0, 300, 1, 400}, range, true);
    expect_round_trip(grid, features_of_every_dtype(grid.total_voxels()), {});
  }
}

TEST(NvdbIo, RoundTripsDenseBlocksThatFillWholeNodes) {
  const GridBatch grid = GridBatch::from_dense(2, {130, 9, 17}, {-65, -4, 120});
  expect_round_trip(grid, {random_feature(grid.total_voxels(), {2}, DType::Float32)},
                    {"first", "a name with spaces and punctuation: [x]"});
}

TEST(NvdbIo, RoundTripsEmptyBatchesAndEmptyGrids) {
  expect_round_trip(random_batch({}, 10, false), {}, {});
  const GridBatch empty_grids = random_batch({0, 0, 0}, 10, false);
  expect_round_trip(empty_grids, {random_feature(0, {3}, DType::Float32)}, {"a", "b", "c"});
}

TEST(NvdbIo, WritesTheSameBytesTwice) {
  const GridBatch grid = random_batch({500, 20}, 100, false);
  const std::vector<Tensor> features{random_feature(grid.total_voxels(), {}, DType::Float32)};
  TempFile a, b;
  save_nvdb(a.str(), grid, features);
  save_nvdb(b.str(), grid, features);
  EXPECT_EQ(file_bytes(a.str()), file_bytes(b.str()));
}

TEST(NvdbIo, GridFromTheGpuWritesTheSameFile) {
  TG_SKIP_WITHOUT_GPU();
  const GridBatch grid = random_batch({800, 0, 30}, 200, true);
  const std::vector<Tensor> features{random_feature(grid.total_voxels(), {2}, DType::Float32)};
  TempFile cpu, gpu;
  save_nvdb(cpu.str(), grid, features);
  save_nvdb(gpu.str(), grid.to(Device::cuda(0)), {features[0].to(Device::cuda(0))});
  EXPECT_EQ(file_bytes(cpu.str()), file_bytes(gpu.str()));
}

// The error's message, or "" when `f` does not throw ValueError.
template <class F>
std::string value_error(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(NvdbIo, BadArgumentsGetClearErrors) {
  const GridBatch grid = random_batch({10, 5}, 4, false);
  TempFile file;
  EXPECT_NE(value_error([&] {
              save_nvdb(file.str(), grid,
                        {random_feature(grid.total_voxels() - 1, {}, DType::Float32)});
            }).find("one row per active voxel (" + std::to_string(grid.total_voxels()) + ")"),
            std::string::npos);
  EXPECT_NE(value_error([&] {
              save_nvdb(file.str(), grid, {}, {"only one"});
            }).find("one entry per grid (2), got 1"),
            std::string::npos);
  EXPECT_NE(value_error([&] {
              save_nvdb(file.str(), grid, {}, {"a", std::string(256, 'x')});
            }).find("at most 255 bytes, got 256"),
            std::string::npos);
  EXPECT_THROW(save_nvdb("/nonexistent-folder/x.nvdb", grid), Error);
}

TEST(NvdbIo, BadFilesGetClearErrors) {
  const GridBatch grid = random_batch({100, 7}, 20, false);
  TempFile good, bad;
  // 32.4's layout: its checksum covers the root table, so a patched root offset below is not
  // caught by the checksum first.
  save_nvdb(good.str(), grid, {random_feature(grid.total_voxels(), {}, DType::Float32)}, {},
            NvdbFormat::V32_4);
  const std::vector<char> bytes = file_bytes(good.str());
  auto load_error = [&](std::vector<char> modified) {
    write_bytes(bad.str(), modified);
    return value_error([&] { load_nvdb(bad.str()); });
  };
  auto expect_error = [&](const std::vector<char>& modified, const std::string& part) {
    const std::string message = load_error(modified);
    EXPECT_NE(message.find(part), std::string::npos) << "got \"" << message << "\"";
  };

  try {
    load_nvdb(bad.str() + ".absent");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  expect_error({}, "the file is empty");
  std::vector<char> text(bytes.begin(), bytes.begin() + 64);
  std::memcpy(text.data(), "ply\nformat ascii 1.0\n", 21);
  expect_error(text,
               "not a NanoVDB file: expected the magic number \"NanoVDB0\" or \"NanoVDB2\", got "
               "\"ply?form\"");
  expect_error(std::vector<char>(bytes.begin(), bytes.end() - 100), "truncated");

  auto patched = [&](size_t at, const auto& value) {
    std::vector<char> out = bytes;
    std::memcpy(out.data() + at, &value, sizeof(value));
    return out;
  };
  const size_t version_at = 8, codec_at = 14;
  expect_error(patched(version_at, uint32_t(31u << 21)),
               "NanoVDB file format 31.0; tilegrid reads major version 32");
  expect_error(patched(version_at, uint32_t(32u << 21 | 10u << 10)),
               "NanoVDB file format 32.10; tilegrid reads 32.0 to 32.9");
  expect_error(patched(codec_at, uint16_t(7)), "names codec 7");
  // A codec the grids were not written with: the grid's first 8 bytes read as a chunk size.
  expect_error(patched(codec_at, uint16_t(1)), nvdb::codec_available(nvdb::kCodecZip)
                                                   ? "compressed chunk of"
                                                   : "made without zlib");
  // The first grid's buffer follows the segment header and both grid records (176 bytes and
  // the name, "grid_0" + NUL, each).
  const size_t grid_at = 16 + 2 * (176 + 7);
  expect_error(patched(grid_at + 636, uint32_t(8)), "GridType 8; tilegrid reads index grids");
  expect_error(patched(grid_at + 40, 'X'), "checksum does not match");
  expect_error(patched(grid_at + 672 + 24, uint64_t(1) << 40), "lies outside the grid");
}

TEST(NvdbIo, CorruptedFilesLoadOrThrowButNeverCrash) {
  const GridBatch grid = random_batch({60, 0, 9}, 30, true);
  TempFile good, bad;
  save_nvdb(good.str(), grid, {random_feature(grid.total_voxels(), {2}, DType::Int64)});
  const std::vector<char> bytes = file_bytes(good.str());
  // Corrupt the records and headers mostly (the first 2 KB), where offsets and counts live,
  // and sometimes anywhere.
  std::uniform_int_distribution<size_t> head(0, 2047), anywhere(0, bytes.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<char> modified = bytes;
    for (int n = 0; n < 4; ++n) {
      const size_t at = trial % 2 ? head(testing::rng()) : anywhere(testing::rng());
      modified[at] = char(byte(testing::rng()));
    }
    write_bytes(bad.str(), modified);
    try {
      load_nvdb(bad.str());
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 50);
}

}  // namespace
}  // namespace tilegrid::grid
