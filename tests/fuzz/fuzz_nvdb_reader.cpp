// A libFuzzer harness for the .nvdb reader: grid::load_nvdb, the C++ entry point tg.load calls,
// compiled under the build's sanitizers (CI's: AddressSanitizer + UndefinedBehaviorSanitizer), so
// that an out-of-bounds access, a use after free, a leak or undefined behaviour anywhere the
// reader goes fails the run, not only a crash. Each input is written to a file and loaded; it
// passes when load_nvdb throws the documented error (exactly ValueError, its message naming the
// file) or returns contents that keep their promises: one name per grid, one feature row per
// voxel, and save_nvdb then load_nvdb giving back the same voxels, transforms, features and names
// (fuzz_readers.py's oracle for tg.load). Any other exception, a sanitizer report, a hang
// (-timeout) or memory past -rss_limit_mb stops the run with the input saved. Three inputs in four
// (chosen by a hash of their bytes, so a saved input replays alike) get their grids' header
// checksums recomputed before reading, as in fuzz_readers.py: a mutated header would otherwise
// stop at the checksum test. With TILEGRID_FUZZ_STATS=<file> the outcome counts are written there
// at exit. scripts/fuzz.sh runs it (target nvdb-cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "grid/io/nvdb_layout.h"
#include "tilegrid/core/error.h"
#include "tilegrid/grid/nvdb_io.h"

namespace {

using tilegrid::Tensor;
using tilegrid::ValueError;
using tilegrid::grid::GridBatch;
using tilegrid::grid::load_nvdb;
using tilegrid::grid::NvdbContents;
using tilegrid::grid::save_nvdb;
namespace nvdb = tilegrid::grid::nvdb;

struct Counts {
  uint64_t inputs = 0, clear_errors = 0, loaded = 0;
};
Counts counts;
std::filesystem::path folder, input_path, again_path;
std::vector<std::vector<uint8_t>> seeds;  // the files of the corpus folders given

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_nvdb_reader: %s\n", what.c_str());
  std::abort();
}

template <class T>
bool load_at(std::span<const uint8_t> data, uint64_t at, T& value) {
  if (at > data.size() || data.size() - at < sizeof(T)) return false;
  std::memcpy(&value, data.data() + at, sizeof(T));
  return true;
}

// Where the first segment's grid buffers start, and their sizes, as far as the bytes give them.
struct Segment {
  uint64_t grids_at = 0;
  std::vector<uint64_t> grid_sizes;
};

Segment first_segment(std::span<const uint8_t> data) {
  Segment out;
  nvdb::FileHeader header;
  if (!load_at(data, 0, header)) return out;
  uint64_t at = sizeof(header);
  for (uint16_t g = 0; g < header.grid_count; ++g) {
    nvdb::FileGridMeta meta;
    if (!load_at(data, at, meta)) return out;
    out.grid_sizes.push_back(meta.grid_size);
    at += sizeof(meta) + meta.name_size;
  }
  out.grids_at = at;
  return out;
}

// Recomputes the low (header) half of each checksum of the first segment's grids, where the
// bytes give a grid record, tree header and root table that lie inside the input.
void recompute_checksums(std::vector<uint8_t>& data) {
  const Segment segment = first_segment(data);
  uint64_t grid = segment.grids_at;
  for (const uint64_t size : segment.grid_sizes) {
    const uint64_t tree = grid + sizeof(nvdb::GridHeader);
    nvdb::TreeHeader tree_header;
    nvdb::RootHeader root_header;
    if (!load_at(data, tree, tree_header)) return;
    const uint64_t root = tree + tree_header.node_offset[3];
    if (root < tree || !load_at(data, root, root_header)) return;
    const uint64_t end =
        root + sizeof(root_header) + uint64_t(root_header.tile_count) * sizeof(nvdb::RootTile);
    if (end > data.size()) return;
    const uint32_t crc =
        nvdb::crc32(data.data() + grid + nvdb::kChecksumStart, end - grid - nvdb::kChecksumStart);
    uint64_t checksum;
    load_at(data, grid + offsetof(nvdb::GridHeader, checksum), checksum);
    checksum = (checksum & ~uint64_t(0xffffffff)) | crc;
    std::memcpy(data.data() + grid + offsetof(nvdb::GridHeader, checksum), &checksum, 8);
    if (size > data.size() - grid) return;
    grid += size;
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.numel() == 0 || std::memcmp(a.data(), b.data(), a.view().nbytes()) == 0);
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void check_contents(const NvdbContents& c) {
  const GridBatch& grid = c.grid;
  if (int64_t(c.names.size()) != grid.num_grids())
    fail(std::to_string(c.names.size()) + " names for " + std::to_string(grid.num_grids()) +
         " grids");
  for (const Tensor& f : c.features)
    if (f.shape().empty() || f.shape()[0] != grid.total_voxels())
      fail("a feature of " + std::to_string(f.shape().empty() ? 0 : f.shape()[0]) + " rows for " +
           std::to_string(grid.total_voxels()) + " voxels");
  try {
    save_nvdb(again_path.string(), grid, c.features, c.names);
  } catch (const ValueError&) {
    return;  // something save refuses (a name over 255 bytes), not a reading error
  }
  NvdbContents back;
  try {
    back = load_nvdb(again_path.string());
  } catch (const std::exception& e) {
    fail(std::string("loading what save_nvdb wrote fails: ") + e.what());
  }
  bool same = back.names == c.names && back.features.size() == c.features.size() &&
              same_bytes(back.grid.ijk().jdata(), grid.ijk().jdata()) &&
              same_bytes(back.grid.voxel_offsets(), grid.voxel_offsets()) &&
              same_bytes(back.grid.voxel_sizes(), grid.voxel_sizes()) &&
              same_bytes(back.grid.origins(), grid.origins());
  for (size_t k = 0; same && k < c.features.size(); ++k)
    same = same_bytes(back.features[k], c.features[k]);
  if (!same) fail("saving what was loaded and loading it again changes it");
}

void write_stats() {
  const char* stats = std::getenv("TILEGRID_FUZZ_STATS");
  if (stats == nullptr) return;
  std::ofstream(stats) << "{\"reader\": \"nvdb (C++)\", \"inputs\": " << counts.inputs
                       << ", \"clear_errors\": " << counts.clear_errors
                       << ", \"loaded\": " << counts.loaded << "}";
}

void at_exit() {
  write_stats();
  std::error_code ignored;
  std::filesystem::remove_all(folder, ignored);
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Half of the mutations are libFuzzer's own. The other half change one to four non-zero 8-byte
// words of the input or, every other time, of a seed file (as fuzz_readers.py does: most inputs
// that coverage keeps are refused early, and a mutation of a valid file reaches the checks
// behind them): where a .nvdb file keeps its offsets, counts, masks, child tables and names (as
// 4 or 8 bytes, at the word or 4 bytes in), each is set to a boundary value (0, -1, 2^31 - 1,
// 2^63, ...), nudged, a bit flipped or another such word copied over (a child offset onto its
// neighbour's: shared nodes); one in twenty is also cut short. A byte mutation rarely makes a
// whole offset or count.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned seed) {
  // Boundary values are 2^k - 1, 2^k and 2^k + 1 for these k (2^64 wraps to 0), or minus those.
  static constexpr int kBits[] = {0, 1, 2, 3, 5, 8, 12, 15, 16, 20, 31, 32, 61, 62, 63, 64};
  std::minstd_rand rng(seed);
  if (rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  if (!seeds.empty() && rng() % 2 == 0) {
    const std::vector<uint8_t>& from = seeds[rng() % seeds.size()];
    if (from.size() <= max_size) {
      std::copy(from.begin(), from.end(), data);
      size = from.size();
    }
  }
  // Fields lie on 8-byte boundaries of the file up to the first grid buffer, of the buffer from
  // there on (a grid name of any length comes before it).
  const uint64_t grids_at = std::min<uint64_t>(first_segment({data, size}).grids_at, size);
  std::vector<size_t> words;
  const auto add_words = [&](size_t from, size_t to) {
    for (size_t at = from; at + 8 <= to; at += 8) {
      uint64_t word;
      std::memcpy(&word, data + at, 8);
      if (word != 0) words.push_back(at);
    }
  };
  add_words(0, grids_at);
  add_words(grids_at, size);
  if (words.empty()) return LLVMFuzzerMutate(data, size, max_size);
  for (unsigned n = 1 + rng() % 4; n > 0; --n) {
    const size_t width = rng() % 2 ? 4 : 8;
    const size_t at = std::min(words[rng() % words.size()] + (rng() % 3 == 2 ? 4 : 0), size - 8);
    uint64_t word = 0;
    std::memcpy(&word, data + at, width);
    switch (rng() % 5) {
      case 0:
      case 1: {
        const int k = kBits[rng() % std::size(kBits)];
        word = (k < 64 ? uint64_t(1) << k : 0) + uint64_t(int64_t(rng() % 3) - 1);
        if (rng() % 10 < 3) word = 0 - word;
        break;
      }
      case 2:
        word += uint64_t(int64_t(rng() % 81) - 40);
        break;
      case 3:
        word ^= uint64_t(1) << rng() % (8 * width);
        break;
      default:
        std::memcpy(&word, data + words[rng() % words.size()], width);
    }
    std::memcpy(data + at, &word, width);
  }
  if (rng() % 20 == 0) size = rng() % (size + 1);
  return size;
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int a = 1; a < *argc; ++a) {
    std::error_code error;
    if ((*argv)[a][0] == '-' || !std::filesystem::is_directory((*argv)[a], error)) continue;
    for (const auto& entry : std::filesystem::directory_iterator((*argv)[a], error)) {
      if (!entry.is_regular_file(error) || entry.file_size(error) == 0) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "tilegrid-fuzz-nvdb-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) fail("cannot make a folder under " + pattern);
  folder = pattern;
  input_path = folder / "input.nvdb";
  again_path = folder / "again.nvdb";
  std::atexit(at_exit);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::vector<uint8_t> data(bytes, bytes + size);
  const std::string_view view(reinterpret_cast<const char*>(bytes), size);
  if (std::hash<std::string_view>{}(view) % 4 != 0) recompute_checksums(data);
  const std::string path = input_path.string();
  std::ofstream out(input_path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  out.close();
  if (!out) fail("cannot write " + path);
  ++counts.inputs;
  try {
    check_contents(load_nvdb(path));
    ++counts.loaded;
  } catch (const ValueError& e) {
    if (typeid(e) != typeid(ValueError) || std::strstr(e.what(), path.c_str()) == nullptr)
      fail(std::string("an error other than ValueError naming the file: ") + e.what());
    ++counts.clear_errors;
  } catch (const std::exception& e) {
    fail(std::string("an error other than ValueError: ") + typeid(e).name() + ": " + e.what());
  }
  return 0;
}
