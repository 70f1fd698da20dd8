// save_nvdb: each grid of a batch as one NanoVDB 32.4 or 32.9 index grid (layout in
// nvdb_layout.h).
// Our node arrays already are NanoVDB's tree in breadth-first order (upper nodes in root-table
// order, each node's children contiguous and in position order, the same bit masks), so a grid
// is written node by node with child pointers turned into byte offsets; one grid buffer is in
// memory at a time.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grid/io/nvdb_channels.h"
#include "grid/io/nvdb_layout.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/grid/nvdb_io.h"

namespace tilegrid::grid {
namespace {

constexpr const char* kOp = "save_nvdb";
// A file segment counts its grids in 16 bits; larger batches take several segments.
constexpr size_t kGridsPerSegment = 65535;

struct Box {
  int32_t lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX};
  int32_t hi[3] = {INT32_MIN, INT32_MIN, INT32_MIN};

  bool empty() const { return lo[0] > hi[0]; }
  void add(const Box& o) {
    for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], o.lo[a]), hi[a] = std::max(hi[a], o.hi[a]);
  }
  void store(int32_t out[6]) const {
    std::copy(lo, lo + 3, out);
    std::copy(hi, hi + 3, out + 3);
  }
};

template <int LOG2>
int64_t child_count(const ChildMask<LOG2>& m) {
  constexpr int w = ChildMask<LOG2>::kWords - 1;
  return int64_t(m.before[w]) + popcount64(m.bits[w]);
}

// Bounding box of a leaf's active voxels: voxel n = (i << 6) | (j << 3) | k sits in word i,
// byte j, bit k.
Box leaf_box(const LeafNode& leaf) {
  Box box;
  uint64_t any = 0;
  for (uint64_t word : leaf.voxels.bits) any |= word;
  if (!any) return box;
  for (int i = 0; i < 8; ++i) {
    if (!leaf.voxels.bits[i]) continue;
    box.lo[0] = std::min(box.lo[0], i);
    box.hi[0] = i;
  }
  uint8_t k_bits = 0;
  for (int j = 0; j < 8; ++j) {
    const uint8_t row = uint8_t(any >> (8 * j));
    if (!row) continue;
    box.lo[1] = std::min(box.lo[1], j);
    box.hi[1] = j;
    k_bits |= row;
  }
  box.lo[2] = __builtin_ctz(k_bits);
  box.hi[2] = 31 - __builtin_clz(k_bits);
  const int32_t origin[3] = {leaf.origin.i, leaf.origin.j, leaf.origin.k};
  for (int a = 0; a < 3; ++a) box.lo[a] += origin[a], box.hi[a] += origin[a];
  return box;
}

// A node's bbox and "has active values" flag. Our trees hold no empty nodes, but should one
// occur it gets what NanoVDB's statistics pass gives it: no bbox, "skip" set, and its origin
// kept in bbox[0..2], where NanoVDB reads it from.
void store_node_box(const Box& box, Coord origin, int32_t bbox[6], uint64_t& flags) {
  if (box.empty()) {
    Box at;
    at.lo[0] = at.hi[0] = origin.i;
    at.lo[1] = at.hi[1] = origin.j;
    at.lo[2] = at.hi[2] = origin.k;
    at.store(bbox);
    flags = nvdb::kNodeSkip;
    return;
  }
  box.store(bbox);
  flags = nvdb::kNodeHasActive;
}

// Byte offsets of the parts of one grid buffer.
struct Layout {
  size_t tiles, uppers, lowers, leaves, blind_meta, end;
  std::vector<size_t> blind_data;

  Layout(int64_t num_uppers, int64_t num_lowers, int64_t num_leaves,
         const std::vector<size_t>& blind_bytes) {
    tiles = sizeof(nvdb::GridHeader) + sizeof(nvdb::TreeHeader) + sizeof(nvdb::RootHeader);
    uppers = tiles + size_t(num_uppers) * sizeof(nvdb::RootTile);
    lowers = uppers + size_t(num_uppers) * sizeof(nvdb::UpperNode);
    leaves = lowers + size_t(num_lowers) * sizeof(nvdb::LowerNode);
    blind_meta = leaves + size_t(num_leaves) * sizeof(nvdb::IndexLeaf);
    end = blind_meta + blind_bytes.size() * sizeof(nvdb::BlindMeta);
    for (size_t bytes : blind_bytes) {
      blind_data.push_back(end);
      end = nvdb::align_up(end + bytes);
    }
  }
};

// A zeroed buffer on NanoVDB's 32-byte alignment.
struct alignas(nvdb::kAlignment) Block {
  std::byte bytes[nvdb::kAlignment];
};

struct Feature {
  Tensor data;       // contiguous, on the CPU
  size_t row_bytes;  // bytes of one voxel's values
  std::string name;  // channel name (nvdb_channels.h)
  uint64_t row_numel;
  nvdb::GridType type;
};

void set_map(nvdb::Map& map, const VoxelTransform& t) {
  for (int a = 0; a < 3; ++a) {
    map.mat_d[4 * a] = t.voxel_size[a];
    map.inv_mat_d[4 * a] = 1.0 / t.voxel_size[a];
    map.vec_d[a] = t.origin[a];
  }
  for (int n = 0; n < 9; ++n) {
    map.mat_f[n] = float(map.mat_d[n]);
    map.inv_mat_f[n] = float(map.inv_mat_d[n]);
  }
  for (int a = 0; a < 3; ++a) map.vec_f[a] = float(map.vec_d[a]);
  map.taper_f = 1.0f;  // NanoVDB's builders write 1 (no taper)
  map.taper_d = 1.0;
}

// NanoVDB's world bbox maps the index bbox's min corner and its max corner + 1 (OpenVDB's
// convention: an index bbox is inclusive, a world bbox spans whole voxels from their centres).
void world_box(const Box& box, const VoxelTransform& t, double out[6]) {
  for (int a = 0; a < 3; ++a) {
    if (box.empty()) {
      out[a] = DBL_MAX;
      out[a + 3] = -DBL_MAX;
      continue;
    }
    const double p = t.origin[a] + t.voxel_size[a] * box.lo[a];
    const double q = t.origin[a] + t.voxel_size[a] * (double(box.hi[a]) + 1.0);
    out[a] = std::min(p, q);
    out[a + 3] = std::max(p, q);
  }
}

// What differs between the two formats.
struct FormatFields {
  uint64_t file_magic, grid_magic;
  uint32_t version;
  nvdb::GridType index_type;
  // OnIndex (32.5 on): the leaf's first index in word[0], a prefix sum in word[1].
  bool on_index() const { return index_type == nvdb::GridType::OnIndex; }
};

FormatFields fields_of(NvdbFormat format) {
  if (format == NvdbFormat::V32_9)
    return {nvdb::kMagicFile, nvdb::kMagicGrid, nvdb::version_id(32, 9, 0),
            nvdb::GridType::OnIndex};
  return {nvdb::kMagic, nvdb::kMagic, nvdb::kVersion, nvdb::GridType::Index};
}

// An OnIndex leaf's prefix sum: the active voxels in mask words 0..n-1 for n = 1..7, 9 bits
// each, word n's count at bit 9 (n - 1).
uint64_t prefix_sum(const uint64_t (&mask)[8]) {
  uint64_t sum = 0, count = 0;
  for (int n = 1; n < 8; ++n) {
    count += uint64_t(popcount64(mask[n - 1]));
    sum |= count << (9 * (n - 1));
  }
  return sum;
}

class GridWriter {
 public:
  GridWriter(const GridBatch& batch, const std::vector<Feature>& features, FormatFields format)
      : batch_(batch), tree_(batch.view()), features_(features), format_(format) {}

  // Builds grid b's buffer; fills `meta` (all but name_size).
  std::vector<Block> build(int64_t b, const std::string& name, nvdb::FileGridMeta& meta) const {
    const int64_t u0 = tree_.upper_offsets[b], u1 = tree_.upper_offsets[b + 1];
    int64_t l0 = 0, l1 = 0, n0 = 0, n1 = 0;
    if (u1 > u0) {
      l0 = tree_.uppers[u0].first_lower;
      l1 = tree_.uppers[u1 - 1].first_lower + child_count(tree_.uppers[u1 - 1].lowers);
      n0 = tree_.lowers[l0].first_leaf;
      n1 = tree_.lowers[l1 - 1].first_leaf + child_count(tree_.lowers[l1 - 1].leaves);
    }
    const int64_t row0 = static_cast<const int64_t*>(batch_.voxel_offsets().data())[b];
    const int64_t voxels = batch_.num_voxels(b);
    std::vector<size_t> blind_bytes;
    for (const Feature& f : features_) blind_bytes.push_back(size_t(voxels + 1) * f.row_bytes);
    const Layout at(u1 - u0, l1 - l0, n1 - n0, blind_bytes);

    std::vector<Block> buffer(at.end / nvdb::kAlignment);  // value-initialised: all zeros
    std::byte* base = buffer.front().bytes;
    auto* grid = reinterpret_cast<nvdb::GridHeader*>(base);
    auto* tree = reinterpret_cast<nvdb::TreeHeader*>(grid + 1);
    auto* root = reinterpret_cast<nvdb::RootHeader*>(tree + 1);
    auto* tiles = reinterpret_cast<nvdb::RootTile*>(base + at.tiles);
    auto* uppers = reinterpret_cast<nvdb::UpperNode*>(base + at.uppers);
    auto* lowers = reinterpret_cast<nvdb::LowerNode*>(base + at.lowers);
    auto* leaves = reinterpret_cast<nvdb::IndexLeaf*>(base + at.leaves);
    auto offset = [](const void* from, const void* to) {
      return int64_t(static_cast<const std::byte*>(to) - static_cast<const std::byte*>(from));
    };

    std::vector<Box> leaf_boxes(size_t(n1 - n0)), lower_boxes(size_t(l1 - l0));
    for (int64_t n = n0; n < n1; ++n) {
      const LeafNode& src = tree_.leaves[n];
      nvdb::IndexLeaf& dst = leaves[n - n0];
      const Box box = leaf_box(src);
      leaf_boxes[size_t(n - n0)] = box;
      // 32.4: bit 4 marks the sparse index; 32.5 on it means statistics, which these lack.
      dst.flags = format_.on_index() ? 0 : nvdb::kLeafSparseIndex;
      if (box.empty()) {
        dst.bbox_min[0] = src.origin.i, dst.bbox_min[1] = src.origin.j,
        dst.bbox_min[2] = src.origin.k;
      } else {
        for (int a = 0; a < 3; ++a) {
          dst.bbox_min[a] = box.lo[a];
          dst.bbox_dif[a] = uint8_t(box.hi[a] - box.lo[a]);
        }
        dst.flags |= nvdb::kLeafHasBBox;
      }
      std::copy(src.voxels.bits, src.voxels.bits + 8, dst.value_mask);
      const uint64_t first_index = uint64_t(src.first_voxel - row0 + 1);  // 0: the background
      if (format_.on_index()) {
        dst.word[0] = first_index;
        dst.word[1] = prefix_sum(dst.value_mask);
      } else {
        dst.word[1] = first_index;
      }
    }
    for (int64_t l = l0; l < l1; ++l) {
      const LowerNode& src = tree_.lowers[l];
      nvdb::LowerNode& dst = lowers[l - l0];
      Box& box = lower_boxes[size_t(l - l0)];
      std::copy(std::begin(src.leaves.bits), std::end(src.leaves.bits), dst.child_mask);
      for (uint32_t pos = 0; pos < uint32_t(ChildMask<kLowerLog2>::kChildren); ++pos) {
        if (!src.leaves.test(pos)) continue;
        const int64_t child = src.first_leaf + src.leaves.rank(pos) - n0;
        dst.table[pos].child = offset(&dst, &leaves[child]);
        box.add(leaf_boxes[size_t(child)]);
      }
      store_node_box(box, src.origin, dst.bbox, dst.flags);
    }
    Box grid_box;
    for (int64_t u = u0; u < u1; ++u) {
      const UpperNode& src = tree_.uppers[u];
      nvdb::UpperNode& dst = uppers[u - u0];
      Box box;
      std::copy(std::begin(src.lowers.bits), std::end(src.lowers.bits), dst.child_mask);
      for (uint32_t pos = 0; pos < uint32_t(ChildMask<kUpperLog2>::kChildren); ++pos) {
        if (!src.lowers.test(pos)) continue;
        const int64_t child = src.first_lower + src.lowers.rank(pos) - l0;
        dst.table[pos].child = offset(&dst, &lowers[child]);
        box.add(lower_boxes[size_t(child)]);
      }
      store_node_box(box, src.origin, dst.bbox, dst.flags);
      grid_box.add(box);
      nvdb::RootTile& tile = tiles[u - u0];
      tile.key = nvdb::root_key(src.origin.i, src.origin.j, src.origin.k);
      tile.child = offset(root, &dst);
    }
    grid_box.store(root->bbox);
    root->tile_count = uint32_t(u1 - u0);

    const int64_t tree_at = int64_t(sizeof(nvdb::GridHeader));
    if (n1 > n0) tree->node_offset[0] = uint64_t(int64_t(at.leaves) - tree_at);
    if (l1 > l0) tree->node_offset[1] = uint64_t(int64_t(at.lowers) - tree_at);
    if (u1 > u0) tree->node_offset[2] = uint64_t(int64_t(at.uppers) - tree_at);
    tree->node_offset[3] = sizeof(nvdb::TreeHeader);
    tree->node_count[0] = uint32_t(n1 - n0);
    tree->node_count[1] = uint32_t(l1 - l0);
    tree->node_count[2] = uint32_t(u1 - u0);
    tree->voxel_count = uint64_t(voxels);

    for (size_t k = 0; k < features_.size(); ++k) {
      const Feature& f = features_[k];
      auto* blind = reinterpret_cast<nvdb::BlindMeta*>(base + at.blind_meta) + k;
      std::byte* data = base + at.blind_data[k];
      blind->data_offset = offset(blind, data);
      blind->element_count = uint64_t(voxels + 1) * f.row_numel;
      if (format_.on_index())
        blind->flags = uint32_t(itemsize(f.data.dtype()));  // 32.5 on: bytes a value
      blind->semantic = nvdb::kBlindSemanticUnknown;
      blind->data_class = nvdb::kBlindClassChannelArray;
      blind->data_type = uint32_t(f.type);
      std::memcpy(blind->name, f.name.data(), f.name.size());
      // Row 0 stays zero: the value an inactive voxel (index 0) reads.
      if (voxels > 0 && f.row_bytes > 0)
        std::memcpy(data + f.row_bytes,
                    static_cast<const std::byte*>(f.data.data()) + size_t(row0) * f.row_bytes,
                    size_t(voxels) * f.row_bytes);
    }

    const VoxelTransform t = transform_of(b);
    grid->magic = format_.grid_magic;
    grid->version = format_.version;
    grid->flags = nvdb::kGridIsBreadthFirst | (grid_box.empty() ? 0u : nvdb::kGridHasBBox);
    grid->grid_index = 0;  // every grid is its own buffer, as NanoVDB's writers store them
    grid->grid_count = 1;
    grid->grid_size = at.end;
    std::memcpy(grid->name, name.data(), name.size());
    set_map(grid->map, t);
    world_box(grid_box, t, grid->world_bbox);
    std::copy(t.voxel_size, t.voxel_size + 3, grid->voxel_size);
    grid->grid_class = nvdb::kGridClassIndexGrid;
    grid->grid_type = uint32_t(format_.index_type);
    if (!features_.empty()) grid->blind_meta_offset = int64_t(at.blind_meta);
    grid->blind_meta_count = uint32_t(features_.size());
    grid->value_count = uint64_t(voxels) + 1;
    // The checksum's first half: to the end of the root table (32.4), of the tree header (32.9).
    const size_t head_end = format_.version >= nvdb::kShortHeadChecksumFrom
                                ? sizeof(nvdb::GridHeader) + sizeof(nvdb::TreeHeader)
                                : at.uppers;
    const uint32_t crc = nvdb::crc32(base + nvdb::kChecksumStart, head_end - nvdb::kChecksumStart);
    grid->checksum = uint64_t(nvdb::kCrcEmpty) << 32 | crc;

    meta.grid_size = meta.file_size = at.end;
    meta.name_key = nvdb::name_hash(name);
    meta.voxel_count = uint64_t(voxels);
    meta.grid_type = grid->grid_type;
    meta.grid_class = grid->grid_class;
    std::copy(grid->world_bbox, grid->world_bbox + 6, meta.world_bbox);
    grid_box.store(meta.index_bbox);
    std::copy(t.voxel_size, t.voxel_size + 3, meta.voxel_size);
    std::copy(tree->node_count, tree->node_count + 3, meta.node_count);
    meta.node_count[3] = 1;
    meta.codec = nvdb::kCodecNone;
    meta.version = format_.version;
    if (format_.on_index()) meta.padding = uint16_t(features_.size());
    return buffer;
  }

 private:
  VoxelTransform transform_of(int64_t b) const {
    VoxelTransform t;
    for (int a = 0; a < 3; ++a) {
      t.voxel_size[a] = batch_.voxel_sizes()[size_t(b)][size_t(a)];
      t.origin[a] = batch_.origins()[size_t(b)][size_t(a)];
    }
    return t;
  }

  const GridBatch& batch_;
  TreeView tree_;
  const std::vector<Feature>& features_;
  FormatFields format_;
};

std::vector<Feature> check_features(const std::vector<Tensor>& features, int64_t total_voxels) {
  std::vector<Feature> out;
  for (size_t k = 0; k < features.size(); ++k) {
    const Tensor& t = features[k];
    const std::string arg = "features[" + std::to_string(k) + "]";
    TG_CHECK_VALUE(t.view().ndim() >= 1, kOp, ": ", arg,
                   " must have a leading voxel dimension, got shape ", t.shape());
    TG_CHECK_VALUE(t.shape()[0] == total_voxels, kOp, ": ", arg,
                   " must have one row per active "
                   "voxel (",
                   total_voxels, "), got shape ", t.shape());
    Feature f;
    // An empty tensor has no bytes to copy (and may carry strides Tensor::to refuses).
    const bool usable = t.numel() == 0 || (t.device().is_cpu() && t.view().is_contiguous());
    f.data = usable ? t : t.to(Device::cpu());
    const Shape& s = t.shape();
    const Shape row(s.begin() + 1, s.end());
    f.row_numel = uint64_t(row.numel());
    f.row_bytes = size_t(f.row_numel) * itemsize(t.dtype());
    f.type = nvdb::grid_type_of(t.dtype());
    f.name = nvdb::channel_name(k, t.dtype(), row);
    TG_CHECK_VALUE(f.name.size() < nvdb::kNameSize, kOp, ": ", arg,
                   " has too many dimensions "
                   "to describe in a channel name: shape ",
                   s);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<std::string> grid_names(const std::vector<std::string>& names, int64_t grids) {
  if (names.empty()) {
    std::vector<std::string> out;
    for (int64_t b = 0; b < grids; ++b) out.push_back("grid_" + std::to_string(b));
    return out;
  }
  TG_CHECK_VALUE(int64_t(names.size()) == grids, kOp, ": names must have one entry per grid (",
                 grids, "), got ", int64_t(names.size()));
  for (const std::string& n : names) {
    TG_CHECK_VALUE(n.size() < nvdb::kNameSize, kOp, ": a grid name has at most ",
                   int64_t(nvdb::kNameSize - 1), " bytes, got ", int64_t(n.size()), " for \"",
                   n.substr(0, 32), "...\"");
    TG_CHECK_VALUE(n.find('\0') == std::string::npos, kOp,
                   ": grid names cannot contain NUL characters");
  }
  return names;
}

template <class T>
void write_raw(std::ofstream& os, const T& value) {
  os.write(reinterpret_cast<const char*>(&value), sizeof(T));
}

}  // namespace

void save_nvdb(const std::string& path, const GridBatch& grid, const std::vector<Tensor>& features,
               const std::vector<std::string>& names, NvdbFormat format) {
  const std::vector<std::string> all_names = grid_names(names, grid.num_grids());
  const std::vector<Feature> channels = check_features(features, grid.total_voxels());
  const GridBatch host = grid.device().is_cpu() ? grid : grid.to(Device::cpu());
  const FormatFields fields = fields_of(format);
  const GridWriter writer(host, channels, fields);

  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  TG_CHECK(os.is_open(), kOp, ": cannot open \"", path, "\" for writing");
  const size_t grids = size_t(grid.num_grids());
  size_t first = 0;
  do {  // one segment per kGridsPerSegment grids; an empty batch writes one empty segment
    const size_t count = std::min(kGridsPerSegment, grids - first);
    size_t header_bytes = sizeof(nvdb::FileHeader);
    for (size_t b = first; b < first + count; ++b)
      header_bytes += sizeof(nvdb::FileGridMeta) + all_names[b].size() + 1;
    // The grid records need each grid's size, known once it is built: write the grids after
    // room for the records, then go back and fill it.
    const std::streampos start = os.tellp();
    os.write(std::string(header_bytes, '\0').data(), std::streamsize(header_bytes));
    std::vector<nvdb::FileGridMeta> metas(count);
    for (size_t b = first; b < first + count; ++b) {
      nvdb::FileGridMeta& meta = metas[b - first];
      meta = {};
      const std::vector<Block> buffer = writer.build(int64_t(b), all_names[b], meta);
      meta.name_size = uint32_t(all_names[b].size() + 1);
      os.write(reinterpret_cast<const char*>(buffer.data()),
               std::streamsize(buffer.size() * sizeof(Block)));
    }
    const std::streampos end = os.tellp();
    os.seekp(start);
    write_raw(
        os, nvdb::FileHeader{fields.file_magic, fields.version, uint16_t(count), nvdb::kCodecNone});
    for (size_t b = first; b < first + count; ++b) {
      write_raw(os, metas[b - first]);
      os.write(all_names[b].c_str(), std::streamsize(all_names[b].size() + 1));
    }
    os.seekp(end);
    first += count;
  } while (first < grids);
  os.close();
  TG_CHECK(!os.fail(), kOp, ": writing \"", path, "\" failed (disk full or file not writable?)");
}

}  // namespace tilegrid::grid
