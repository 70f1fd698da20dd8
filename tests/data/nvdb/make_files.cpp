// Writes the .nvdb files in this folder with NanoVDB 32.9's own writer, laid out the way fVDB's
// save writes them, so that tilegrid's reader is tested on files it did not write:
//   - a batch of two grids in one segment (grid_index / grid_count 0..1 of 2), each with its own
//     voxel size and origin;
//   - index grids (GridType::OnIndex, class IndexGrid) when no features are saved;
//   - a typed grid (Float, Vec3f, Vec4d, Int64) whose leaf values are the features, with the
//     "fvdb_jdata" blind record holding the feature tensor's shape [rdim, N, d1, ...];
//   - an index grid of class TensorGrid whose blind record "fvdb_jdata<dtype>" holds the shape
//     followed by the raw feature rows (fVDB's route for dtypes and shapes without a GridType);
//   - each also compressed with ZIP (zlib) and BLOSC (LZ4), the codecs NanoVDB's writer offers.
// The voxels and values follow formulas the tests recompute (voxel_value below).
//
// Build and run from this folder (OpenVDB's nanovdb/ headers, zlib and c-blosc 1.x):
//   g++ -std=c++17 -O1 -I<openvdb>/nanovdb -DNANOVDB_USE_ZIP -DNANOVDB_USE_BLOSC \
//       make_files.cpp -lz -lblosc -o /tmp/make_files && /tmp/make_files
#include <nanovdb/GridHandle.h>
#include <nanovdb/NanoVDB.h>
#include <nanovdb/io/IO.h>
#include <nanovdb/tools/CreateNanoGrid.h>
#include <nanovdb/tools/GridBuilder.h>
#include <nanovdb/tools/GridChecksum.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Ijk = std::array<int32_t, 3>;

// Grid b's voxels: a dense 6x5x4 block near the origin, a thin line crossing a leaf boundary,
// and a few voxels with negative coordinates in other upper nodes (two root tiles).
std::vector<Ijk> voxels_of(int b) {
  std::vector<Ijk> v;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 4; ++k) v.push_back({i + 3 * b, j - 2, k + 5});
  for (int i = 0; i < 11; ++i) v.push_back({20 + i, 9, -3 - b});
  v.push_back({-4100, 7, 1});
  v.push_back({-4101, 7, 2 + b});
  if (b == 0) v.push_back({1, -5000, 4096});
  return v;
}

// Feature c of voxel (i, j, k): exact in float32 for the coordinates above.
double voxel_value(const Ijk& p, int c) {
  return p[0] + 0.5 * p[1] + 0.25 * p[2] + 100.0 * c;
}

// A smaller one, exact in float16: (i mod 16) + (k mod 8) / 4 + c.
double small_value(const Ijk& p, int c) {
  const int i = ((p[0] % 16) + 16) % 16, k = ((p[2] % 8) + 8) % 8;
  return i + 0.25 * k + c;
}

// The float16 bits of `x`, a number float16 holds exactly (normal or zero, as small_value's).
uint16_t half_bits(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  if ((f & 0x7fffffffu) == 0) return uint16_t(f >> 16);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const int exponent = int((f >> 23) & 0xff) - 127 + 15;
  return uint16_t(sign | uint32_t(exponent) << 10 | (f & 0x7fffffu) >> 13);
}

const double kVoxelSize[2][3] = {{0.5, 0.5, 0.5}, {0.25, 0.5, 2.0}};
const double kOrigin[2][3] = {{0.25, 0.25, 0.25}, {-1.0, 2.0, 3.5}};
const char* kNames[2] = {"first", "second"};

// The voxel size, origin and name fVDB's save gives each grid (it patches them the same way).
void set_transform_and_name(nanovdb::GridData* g, int b) {
  const double* s = kVoxelSize[b];
  const double mat[3][3] = {{s[0], 0, 0}, {0, s[1], 0}, {0, 0, s[2]}};
  const double inv[3][3] = {{1 / s[0], 0, 0}, {0, 1 / s[1], 0}, {0, 0, 1 / s[2]}};
  g->mVoxelSize = nanovdb::Vec3d(s[0], s[1], s[2]);
  g->mMap.set(mat, inv, nanovdb::Vec3d(kOrigin[b][0], kOrigin[b][1], kOrigin[b][2]));
  std::memset(g->mGridName, 0, nanovdb::GridData::MaxNameSize);
  std::strncpy(g->mGridName, kNames[b], nanovdb::GridData::MaxNameSize - 1);
}

// A copy of `grid` (its GridData at the front) with one blind record named `name` appended and
// `payload` as its data (padded to 32 bytes), the record counting `count` values of `size`
// bytes; class, semantic and type Unknown, as fVDB writes its "fvdb_jdata" records.
nanovdb::GridHandle<nanovdb::HostBuffer> with_blind(const nanovdb::GridHandle<nanovdb::HostBuffer>& h,
                                                    const std::string& name,
                                                    const std::vector<uint8_t>& payload,
                                                    uint64_t count, uint32_t size) {
  const uint64_t grid_bytes = h.gridSize();
  const uint64_t padded = (payload.size() + 31) / 32 * 32;
  const uint64_t total = grid_bytes + sizeof(nanovdb::GridBlindMetaData) + padded;
  nanovdb::HostBuffer buffer(total);
  auto* bytes = static_cast<uint8_t*>(buffer.data());
  std::memset(bytes, 0, total);
  std::memcpy(bytes, h.data(), grid_bytes);
  auto* g = reinterpret_cast<nanovdb::GridData*>(bytes);
  g->mGridSize = total;
  g->mBlindMetadataCount = 1;
  g->mBlindMetadataOffset = int64_t(grid_bytes);
  auto* meta = reinterpret_cast<nanovdb::GridBlindMetaData*>(bytes + grid_bytes);
  meta->mDataOffset = int64_t(sizeof(nanovdb::GridBlindMetaData));
  meta->mValueCount = count;
  meta->mValueSize = size;
  meta->mSemantic = nanovdb::GridBlindDataSemantic::Unknown;
  meta->mDataClass = nanovdb::GridBlindDataClass::Unknown;
  meta->mDataType = nanovdb::GridType::Unknown;
  std::strncpy(meta->mName, name.c_str(), nanovdb::GridBlindMetaData::MaxNameSize - 1);
  std::memcpy(bytes + grid_bytes + sizeof(nanovdb::GridBlindMetaData), payload.data(),
              payload.size());
  return nanovdb::GridHandle<nanovdb::HostBuffer>(std::move(buffer));
}

// The GridData at the front of a handle's (one-grid) buffer, to patch.
nanovdb::GridData* data_of(nanovdb::GridHandle<nanovdb::HostBuffer>& h) {
  return static_cast<nanovdb::GridData*>(h.data());
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The index grid of batch entry b (active voxels only, no statistics or tiles: fVDB's kind).
nanovdb::GridHandle<nanovdb::HostBuffer> index_grid(int b) {
  nanovdb::tools::build::Grid<float> src(0.0f);
  auto acc = src.getAccessor();
  for (const Ijk& p : voxels_of(b)) acc.setValue(nanovdb::Coord(p[0], p[1], p[2]), 1.0f);
  auto h = nanovdb::tools::createNanoGrid<nanovdb::tools::build::Grid<float>, nanovdb::ValueOnIndex>(
      src, 0u, false, false);
  set_transform_and_name(data_of(h), b);
  return h;
}

// A typed grid of batch entry b whose active voxels hold make(p).
template <class BuildT, class Make>
nanovdb::GridHandle<nanovdb::HostBuffer> typed_grid(int b, Make make) {
  nanovdb::tools::build::Grid<BuildT> src(BuildT{});
  auto acc = src.getAccessor();
  for (const Ijk& p : voxels_of(b)) acc.setValue(nanovdb::Coord(p[0], p[1], p[2]), make(p));
  auto h = nanovdb::tools::createNanoGrid(src);
  set_transform_and_name(data_of(h), b);
  return h;
}

void finish(std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>>& grids) {
  for (auto& h : grids) nanovdb::tools::updateChecksum(data_of(h), nanovdb::CheckMode::Full);
}

void write_all(const std::string& stem, std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids,
               bool uncompressed) {
  finish(grids);
  const auto merged = nanovdb::mergeGrids(grids);
  if (uncompressed) nanovdb::io::writeGrid(stem + ".nvdb", merged, nanovdb::io::Codec::NONE);
  nanovdb::io::writeGrid(stem + "_zip.nvdb", merged, nanovdb::io::Codec::ZIP);
  nanovdb::io::writeGrid(stem + "_blosc.nvdb", merged, nanovdb::io::Codec::BLOSC);
}

// fVDB's shape record: [rdim, N, d1, ...] as int64.
std::vector<int64_t> shape_of(int b, std::vector<int64_t> tail) {
  std::vector<int64_t> s{int64_t(1 + tail.size()), int64_t(voxels_of(b).size())};
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

}  // namespace

int main() {
  {  // index grids, no features
    std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids;
    for (int b = 0; b < 2; ++b) grids.push_back(index_grid(b));
    write_all("index", std::move(grids), false);
  }
  {  // float32 features of shape [N]: a Float grid
    std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids;
    for (int b = 0; b < 2; ++b) {
      auto h = typed_grid<float>(b, [](const Ijk& p) { return float(voxel_value(p, 0)); });
      grids.push_back(with_blind(h, "fvdb_jdata", as_bytes(shape_of(b, {})), 2, 8));
    }
    write_all("float", std::move(grids), false);
  }
  {  // float32 [N, 3]: a Vec3f grid
    std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids;
    for (int b = 0; b < 2; ++b) {
      auto h = typed_grid<nanovdb::Vec3f>(b, [](const Ijk& p) {
        return nanovdb::Vec3f(float(voxel_value(p, 0)), float(voxel_value(p, 1)),
                              float(voxel_value(p, 2)));
      });
      grids.push_back(with_blind(h, "fvdb_jdata", as_bytes(shape_of(b, {3})), 3, 8));
    }
    write_all("vec3f", std::move(grids), false);
  }
  {  // float64 [N, 4]: a Vec4d grid (32-byte values)
    std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids;
    for (int b = 0; b < 2; ++b) {
      auto h = typed_grid<nanovdb::Vec4d>(b, [](const Ijk& p) {
        return nanovdb::Vec4d(voxel_value(p, 0), voxel_value(p, 1), voxel_value(p, 2),
                              voxel_value(p, 3));
      });
      grids.push_back(with_blind(h, "fvdb_jdata", as_bytes(shape_of(b, {4})), 3, 8));
    }
    write_all("vec4d", std::move(grids), false);
  }
  {  // int64 [N]: an Int64 grid
    std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids;
    for (int b = 0; b < 2; ++b) {
      auto h = typed_grid<int64_t>(b, [](const Ijk& p) { return int64_t(4 * voxel_value(p, 0)); });
      grids.push_back(with_blind(h, "fvdb_jdata", as_bytes(shape_of(b, {})), 2, 8));
    }
    write_all("int64", std::move(grids), false);
  }
  {  // float16 [N, 2, 3]: an index grid of class TensorGrid with the rows as blind data
    std::vector<nanovdb::GridHandle<nanovdb::HostBuffer>> grids;
    for (int b = 0; b < 2; ++b) {
      auto h = index_grid(b);
      data_of(h)->mGridClass = nanovdb::GridClass::TensorGrid;
      const std::vector<int64_t> shape = shape_of(b, {2, 3});
      std::vector<uint8_t> payload = as_bytes(shape);
      // Rows in the grid's index order (index - 1), as fVDB saves its feature tensor.
      const auto* grid = h.grid<nanovdb::ValueOnIndex>();
      const std::vector<Ijk> voxels = voxels_of(b);
      std::vector<uint16_t> rows(voxels.size() * 6);
      for (const Ijk& p : voxels) {
        const uint64_t row = grid->tree().getValue(nanovdb::Coord(p[0], p[1], p[2])) - 1;
        for (int c = 0; c < 6; ++c) rows[row * 6 + c] = half_bits(float(small_value(p, c)));
      }
      const std::vector<uint8_t> data = as_bytes(rows);
      payload.insert(payload.end(), data.begin(), data.end());
      grids.push_back(with_blind(h, "fvdb_jdatafloat16", payload, (payload.size() + 31) / 32 * 32, 1));
    }
    write_all("tensor_float16", std::move(grids), false);
  }
  std::puts("written");
  return 0;
}
