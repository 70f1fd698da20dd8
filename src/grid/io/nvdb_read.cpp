// load_nvdb: NanoVDB 32.x files of index grids (layout in nvdb_layout.h) into a GridBatch and
// feature tensors. The tree is walked from the root table down, each node found through its
// parent's byte offset and bounds-checked; voxel coordinates come from node positions (what
// NanoVDB's lookups use), and each active voxel's NanoVDB index selects its row in the channel
// arrays. The batch is rebuilt with from_ijk, and channel rows are scattered into tilegrid's row
// order, so files whose voxel numbering differs from ours load correctly too.
//
// Any file may arrive, so every count, size and offset read from it is checked for overflow and
// against the bytes the file holds before anything is allocated or walked: each tree node is
// reached once (so the work is bounded by the file's size), each voxel has its own index, and
// each channel's rows lie after the blind data records and inside the grid.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grid/io/nvdb_channels.h"
#include "grid/io/nvdb_codecs.h"
#include "grid/io/nvdb_layout.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/grid/nvdb_io.h"

namespace tilegrid::grid {
namespace {

constexpr const char* kOp = "load_nvdb";

struct alignas(nvdb::kAlignment) Block {
  std::byte bytes[nvdb::kAlignment];
};

struct Channel {
  nvdb::ChannelDesc desc;
  size_t row_bytes;
  const std::byte* rows;     // the row of NanoVDB index i at rows + (i - first_index) * row_bytes
  uint64_t first_index = 0;  // 0 for NanoVDB channel arrays, 1 for fVDB's tensors
};

struct ParsedGrid {
  std::string name;
  Vec3d voxel_size, origin;
  std::vector<int32_t> ijk;     // active voxels in file order
  std::vector<uint64_t> index;  // their NanoVDB indices
  std::vector<Channel> channels;
  std::vector<Block> buffer;  // the grid; owns the rows of channels read from blind data
  std::vector<Block> owned;   // the rows of a grid of values' channel
};

std::string channel_text(const nvdb::ChannelDesc& d) {
  return detail::concat(name(d.dtype), d.row);
}

// Bytes of a file-given name as they appear in a message: printable ASCII kept, anything else
// as \xNN, so that a message is valid UTF-8 whatever the file holds.
std::string printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 32 && u < 127 && u != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    uint32_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return false;
    }
    if (s.size() - i <= size_t(extra)) return false;
    for (int n = 1; n <= extra; ++n) {
      const auto b = static_cast<unsigned char>(s[i + size_t(n)]);
      if (b < (n == 1 ? lo : 0x80) || b > (n == 1 ? hi : 0xbf)) return false;
    }
    i += size_t(extra) + 1;
  }
  return true;
}

// a * b for sizes and counts read from a file: a failure naming `what` when the product does
// not fit in an int64 (sizes are passed on as int64 extents and byte offsets).
template <class Reader>
uint64_t checked_mul(const Reader& r, uint64_t a, uint64_t b, const char* what) {
  uint64_t p;
  if (__builtin_mul_overflow(a, b, &p) || p > uint64_t(INT64_MAX))
    r.fail(what, " is ", a, " x ", b, ", which overflows a 64-bit size: the file is corrupt");
  return p;
}

// Bounds-checked access to one grid buffer.
class GridReader {
 public:
  GridReader(const std::string& path, const std::string& grid, const std::byte* base, uint64_t size)
      : path_(path), grid_(grid), base_(base), size_(size) {}

  template <class T>
  const T& at(int64_t offset, const char* what) const {
    if (offset < 0 || offset % int64_t(alignof(T)) != 0 || uint64_t(offset) > size_ ||
        size_ - uint64_t(offset) < sizeof(T))
      fail(what, " at byte offset ", offset, " lies outside the grid's ", int64_t(size_),
           " bytes (or is misaligned)");
    return *reinterpret_cast<const T*>(base_ + offset);
  }
  const std::byte* bytes(int64_t offset, uint64_t count, const char* what) const {
    if (offset < 0 || uint64_t(offset) > size_ || size_ - uint64_t(offset) < count)
      fail(what, " (", int64_t(count), " bytes at byte offset ", offset,
           ") lies outside the grid's ", int64_t(size_), " bytes");
    return base_ + offset;
  }
  uint64_t size() const { return size_; }
  int64_t offset_of(const void* p) const { return static_cast<const std::byte*>(p) - base_; }
  // base + relative, for offsets read from the file (an absurd one must not overflow).
  int64_t add(int64_t base, int64_t relative, const char* what) const {
    int64_t sum;
    if (__builtin_add_overflow(base, relative, &sum))
      fail(what, " lies at byte offset ", base, " + ", relative, ", outside the grid");
    return sum;
  }

  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw ValueError(
        detail::concat(kOp, ": \"", path_, "\", grid \"", printable(grid_), "\": ", args...));
  }

 private:
  const std::string& path_;
  const std::string& grid_;
  const std::byte* base_;
  uint64_t size_;
};

bool bit(const uint64_t* mask, uint32_t n) {
  return (mask[n >> 6] >> (n & 63)) & 1u;
}

// Origin of child `pos` of a node at `origin` with 2^log2 children a side, each 2^shift wide.
Coord child_origin(Coord origin, uint32_t pos, int log2, int shift) {
  const uint32_t m = (1u << log2) - 1;
  return {origin.i + int32_t(((pos >> (2 * log2)) & m) << shift),
          origin.j + int32_t(((pos >> log2) & m) << shift), origin.k + int32_t((pos & m) << shift)};
}

// The nodes of one tree level. NanoVDB lays each level out as one array (breadth first, the
// tree header giving its offset and length), so a child offset must land on a slot of its
// level's array, and each slot may be reached once. That bounds the walk by the file's size:
// a root table listing one upper node 4,001 times is refused, not walked 4,001 times.
class NodeArray {
 public:
  NodeArray(const GridReader& r, int64_t tree_at, const nvdb::TreeHeader& tree, int level,
            size_t node_size, const char* what, const char* whats)
      : r_(r), node_size_(node_size), count_(tree.node_count[level]), what_(what), whats_(whats) {
    if (count_ == 0) return;
    if (tree.node_offset[level] > uint64_t(INT64_MAX))
      r.fail("the tree header places its ", whats, " at byte offset ", tree.node_offset[level],
             ", outside the grid");
    start_ = r.add(tree_at, int64_t(tree.node_offset[level]), what);
    r.bytes(start_, checked_mul(r, count_, node_size, what), what);
    used_.assign(count_, false);
  }

  // The node at byte offset `at`, marked as reached.
  template <class Node>
  const Node& claim(int64_t at) {
    const bool inside = count_ > 0 && at >= start_;  // then at - start_ cannot overflow
    const int64_t slot = inside ? (at - start_) / int64_t(node_size_) : -1;
    if (!inside || (at - start_) % int64_t(node_size_) != 0 || slot >= count_)
      r_.fail("a child pointer leads to byte offset ", at, ", which is not one of the tree's ",
              count_, " ", whats_, " (", int64_t(node_size_), " bytes each from byte offset ",
              start_, "): the tree is corrupt");
    if (used_[size_t(slot)])
      r_.fail(what_, " ", slot, " (byte offset ", at,
              ") is the child of two parents: the tree shares or repeats nodes, so it is corrupt");
    used_[size_t(slot)] = true;
    ++reached_;
    return r_.at<Node>(at, what_);
  }

  // Every node of the level reached, as the tree header counts them.
  void expect_all_reached() const {
    if (reached_ != count_)
      r_.fail("the tree header counts ", count_, " ", whats_, ", the tree reaches ", reached_,
              ": the file is corrupt");
  }

 private:
  const GridReader& r_;
  size_t node_size_;
  int64_t count_;
  const char* what_;
  const char* whats_;  // the plural
  int64_t start_ = 0, reached_ = 0;
  std::vector<bool> used_;
};

// The node types of a tree whose values are `Value` (statistics `Stats`) and leaves `Leaf`.
template <class Value, class Stats, class LeafT>
struct TreeTypes {
  using Root = nvdb::RootHeaderOf<Value, Stats>;
  using Tile = nvdb::RootTileOf<Value>;
  using Upper = nvdb::InternalNodeOf<5, Value, Stats>;
  using Lower = nvdb::InternalNodeOf<4, Value, Stats>;
  using Leaf = LeafT;
};
using IndexTree = TreeTypes<uint64_t, uint64_t, nvdb::IndexLeaf>;

// The leaf's origin as its parent gives it must be the one it records; its recorded bounding
// box must be its mask's (a mask bit moved or lost shows here). Appends the active voxels'
// coordinates to out.ijk and calls visit(n) for each, in mask order.
template <class Leaf, class Visit>
void walk_leaf_voxels(const GridReader& r, const Leaf& leaf, Coord origin, ParsedGrid& out,
                      Visit&& visit) {
  if ((leaf.bbox_min[0] & ~7) != origin.i || (leaf.bbox_min[1] & ~7) != origin.j ||
      (leaf.bbox_min[2] & ~7) != origin.k)
    r.fail("the leaf at (", origin.i, ", ", origin.j, ", ", origin.k, ") records origin (",
           leaf.bbox_min[0] & ~7, ", ", leaf.bbox_min[1] & ~7, ", ", leaf.bbox_min[2] & ~7,
           "): the tree is corrupt");
  int lo[3] = {8, 8, 8}, hi[3] = {-1, -1, -1};
  for (uint32_t n = 0; n < 512; ++n) {
    if (!bit(leaf.value_mask, n)) continue;
    const int local[3] = {int(n >> 6), int((n >> 3) & 7), int(n & 7)};
    for (int a = 0; a < 3; ++a)
      lo[a] = std::min(lo[a], local[a]), hi[a] = std::max(hi[a], local[a]);
    out.ijk.insert(out.ijk.end(), {origin.i + local[0], origin.j + local[1], origin.k + local[2]});
    visit(n);
  }
  if (leaf.flags & nvdb::kLeafHasBBox) {
    const int32_t o[3] = {origin.i, origin.j, origin.k};
    for (int a = 0; a < 3; ++a)
      if (hi[a] < 0 || leaf.bbox_min[a] - o[a] != lo[a] || leaf.bbox_dif[a] != hi[a] - lo[a])
        r.fail("the leaf at (", origin.i, ", ", origin.j, ", ", origin.k,
               ") records active voxels from ", leaf.bbox_min[a] - o[a], " to ",
               leaf.bbox_min[a] - o[a] + leaf.bbox_dif[a], " on axis ", a, ", its mask from ",
               lo[a], " to ", hi[a], ": the tree is corrupt");
  }
}

// How an index leaf numbers its voxels.
enum class IndexKind {
  Sparse,   // 32.4 GridType::Index with the sparse flag: word[1] + rank among active voxels
  OnIndex,  // 32.5 on: word[0] + rank among active voxels
  Dense,    // 32.5 on, GridType::Index: word[0] + position in the leaf, active or not
};

void walk_index_leaf(const GridReader& r, const nvdb::IndexLeaf& leaf, Coord origin, IndexKind kind,
                     uint64_t value_count, ParsedGrid& out) {
  if (kind == IndexKind::Sparse && !(leaf.flags & nvdb::kLeafSparseIndex))
    r.fail(
        "a leaf indexes inactive voxels too (a dense index grid); tilegrid reads index grids "
        "of NanoVDB 32.4 whose leaves index active voxels only");
  uint64_t next = kind == IndexKind::Sparse ? leaf.word[1] : leaf.word[0];
  walk_leaf_voxels(r, leaf, origin, out, [&](uint32_t n) {
    const uint64_t index = kind == IndexKind::Dense ? leaf.word[0] + n : next++;
    if (index == 0 || index >= value_count)
      r.fail("voxel index ", index, " is outside [1, ", value_count,
             "), the grid's value count: the leaf at (", origin.i, ", ", origin.j, ", ", origin.k,
             ") numbers more voxels than the grid holds");
    out.index.push_back(index);
  });
}

template <int LOG2, class Node>
void check_no_active_tiles(const GridReader& r, const Node& node) {
  for (size_t w = 0; w < std::size(node.value_mask); ++w)
    if (node.value_mask[w] & ~node.child_mask[w])
      r.fail("the tree has active tiles (one value over a whole ", LOG2 == 5 ? 128 : 8,
             "^3 block); tilegrid grids hold voxels only");
}

// Walks the tree from the root table down and calls visit(leaf, origin) for each leaf. Every
// node is bounds-checked, reached once, and all the tree header counts are reached.
template <class Tree, class VisitLeaf>
void walk_tree(const GridReader& r, ParsedGrid& out, VisitLeaf&& visit_leaf) {
  using Root = typename Tree::Root;
  using Tile = typename Tree::Tile;
  using Upper = typename Tree::Upper;
  using Lower = typename Tree::Lower;
  using Leaf = typename Tree::Leaf;
  const int64_t tree_at = sizeof(nvdb::GridHeader);
  const auto& tree = r.at<nvdb::TreeHeader>(tree_at, "the tree header");
  NodeArray leaves(r, tree_at, tree, 0, sizeof(Leaf), "leaf", "leaves");
  NodeArray lowers(r, tree_at, tree, 1, sizeof(Lower), "lower node", "lower nodes");
  NodeArray uppers(r, tree_at, tree, 2, sizeof(Upper), "upper node", "upper nodes");
  const int64_t root_at = r.add(tree_at, int64_t(tree.node_offset[3]), "the root node");
  const auto& root = r.at<Root>(root_at, "the root node");
  const int64_t tiles_at = root_at + int64_t(sizeof(Root));
  r.bytes(tiles_at, uint64_t(root.tile_count) * sizeof(Tile), "the root table");
  for (uint32_t t = 0; t < root.tile_count; ++t) {
    const auto& tile = r.at<Tile>(tiles_at + t * int64_t(sizeof(Tile)), "a tile");
    if (tile.child == 0) {
      if (tile.state)
        r.fail(
            "the root table has an active tile (one value over 4096^3 voxels); "
            "tilegrid grids hold voxels only");
      continue;
    }
    // A key holds 20 bits an axis (a 32-bit coordinate over 4096) in fields 21 bits wide.
    constexpr uint64_t kAxis = (1u << 21) - 1, kUnused = uint64_t(1) << 20;
    const uint64_t axes[3] = {(tile.key >> 42) & kAxis, (tile.key >> 21) & kAxis, tile.key & kAxis};
    if ((tile.key >> 63) || (axes[0] | axes[1] | axes[2]) & kUnused)
      r.fail("root tile ", t, " has key ", tile.key,
             ", which no 32-bit coordinate gives (each 21-bit field holds a coordinate over "
             "4096, below 2^20): the root table is corrupt");
    const Coord upper_origin{int32_t(uint32_t(axes[0]) << 12), int32_t(uint32_t(axes[1]) << 12),
                             int32_t(uint32_t(axes[2]) << 12)};
    const auto& upper = uppers.claim<Upper>(r.add(root_at, tile.child, "an upper node"));
    const int64_t upper_at = r.offset_of(&upper);
    check_no_active_tiles<5>(r, upper);
    for (uint32_t p = 0; p < uint32_t(Upper::kChildren); ++p) {
      if (!bit(upper.child_mask, p)) continue;
      const auto& lower =
          lowers.claim<Lower>(r.add(upper_at, upper.table[p].child, "a lower node"));
      const int64_t lower_at = r.offset_of(&lower);
      check_no_active_tiles<4>(r, lower);
      const Coord lower_origin = child_origin(upper_origin, p, kUpperLog2, kUpperShift);
      for (uint32_t q = 0; q < uint32_t(Lower::kChildren); ++q) {
        if (!bit(lower.child_mask, q)) continue;
        const auto& leaf = leaves.claim<Leaf>(r.add(lower_at, lower.table[q].child, "a leaf"));
        visit_leaf(leaf, child_origin(lower_origin, q, kLowerLog2, kLowerShift));
      }
    }
  }
  leaves.expect_all_reached();
  lowers.expect_all_reached();
  uppers.expect_all_reached();
  if (uint64_t(out.ijk.size() / 3) != tree.voxel_count)
    r.fail("the tree header counts ", tree.voxel_count, " active voxels, the leaves ",
           int64_t(out.ijk.size() / 3));
}

void walk_index_tree(const GridReader& r, const nvdb::GridHeader& grid, IndexKind kind,
                     ParsedGrid& out) {
  walk_tree<IndexTree>(r, out, [&](const nvdb::IndexLeaf& leaf, Coord origin) {
    walk_index_leaf(r, leaf, origin, kind, grid.value_count, out);
  });
  // Each voxel its own row: leaves whose index ranges overlap would share feature rows.
  std::vector<uint64_t> sorted = out.index;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end())
    r.fail("voxel index ", *twice,
           " belongs to two voxels (leaves whose index ranges overlap share feature rows): "
           "the tree is corrupt");
}

// NanoVDB's first checksum half: from byte 16 (magic and checksum excluded) to the end of the
// tree header (32.6.1 on) or of the root table (before).
template <class Tree>
void check_head_checksum(const GridReader& r, const nvdb::GridHeader& grid) {
  if (grid.checksum == nvdb::kChecksumEmpty || grid.checksum == 0 ||
      uint32_t(grid.checksum) == nvdb::kCrcEmpty)
    return;
  uint64_t end = sizeof(nvdb::GridHeader) + sizeof(nvdb::TreeHeader);
  if (grid.version < nvdb::kShortHeadChecksumFrom) {
    const auto& tree = r.at<nvdb::TreeHeader>(sizeof(nvdb::GridHeader), "the tree header");
    const auto& root = r.at<typename Tree::Root>(
        r.add(sizeof(nvdb::GridHeader), int64_t(tree.node_offset[3]), "the root node"),
        "the root node");
    end += sizeof(typename Tree::Root) + uint64_t(root.tile_count) * sizeof(typename Tree::Tile);
  }
  const std::byte* head = r.bytes(0, end, "the checksummed headers");
  if (nvdb::crc32(head + nvdb::kChecksumStart, end - nvdb::kChecksumStart) !=
      uint32_t(grid.checksum))
    r.fail("its header checksum does not match its contents: the file is corrupt");
}

// A grid of values (Float, Vec3f, ...): the active voxels' leaf values become one channel of
// `desc`, its rows in walk order (index = row).
template <class Value, class Stats>
void walk_value_tree(const GridReader& r, const nvdb::GridHeader& grid,
                     const nvdb::ChannelDesc& desc, ParsedGrid& out) {
  using Tree = TreeTypes<Value, Stats, nvdb::ValueLeafOf<Value, Stats>>;
  check_head_checksum<Tree>(r, grid);
  std::vector<Value> values;
  walk_tree<Tree>(r, out, [&](const typename Tree::Leaf& leaf, Coord origin) {
    walk_leaf_voxels(r, leaf, origin, out, [&](uint32_t n) {
      out.index.push_back(values.size());
      values.push_back(leaf.values[n]);
    });
  });
  out.owned.resize(nvdb::align_up(values.size() * sizeof(Value)) / nvdb::kAlignment);
  const std::byte* rows = out.owned.empty() ? nullptr : out.owned.front().bytes;
  if (!values.empty()) std::memcpy(out.owned.data(), values.data(), values.size() * sizeof(Value));
  out.channels.push_back({desc, sizeof(Value), rows, 0});
}

void read_transform(const GridReader& r, const nvdb::Map& map, ParsedGrid& out) {
  for (int a = 0; a < 3; ++a) {
    for (int c = 0; c < 3; ++c)
      if (c != a && map.mat_d[3 * a + c] != 0)
        r.fail(
            "its index-to-world map rotates or shears; tilegrid grids take a per-axis voxel "
            "size and an origin only");
    const double size = map.mat_d[4 * a];
    if (!(size > 0) || !std::isfinite(size) || !std::isfinite(map.vec_d[a]))
      r.fail("its map has voxel size ", size, " and translation ", map.vec_d[a], " on axis ", a,
             "; expected a finite size > 0 and a finite translation");
    out.voxel_size[size_t(a)] = size;
    out.origin[size_t(a)] = map.vec_d[a];
  }
}

// Elements of a row of shape `row`, checked against overflow: with zero extents counted as
// one, so that the strides of a tensor with these rows fit in an int64 too.
uint64_t row_elements(const GridReader& r, const std::string& channel, const Shape& row,
                      size_t itemsize) {
  uint64_t elements = 1, span = itemsize;
  for (const int64_t d : row) {
    if (d < 0 || __builtin_mul_overflow(elements, uint64_t(d), &elements) ||
        __builtin_mul_overflow(span, uint64_t(std::max<int64_t>(d, 1)), &span) ||
        span > uint64_t(INT64_MAX))
      r.fail("channel \"", printable(channel), "\" declares rows of shape ", row,
             ", whose size overflows a 64-bit byte count: the file is corrupt");
  }
  return elements;
}

void read_channels(const GridReader& r, const nvdb::GridHeader& grid, ParsedGrid& out) {
  if (grid.blind_meta_count == 0) return;
  const uint64_t table_bytes = uint64_t(grid.blind_meta_count) * sizeof(nvdb::BlindMeta);
  r.bytes(grid.blind_meta_offset, table_bytes, "the blind data records");
  // Channel data follows the records (NanoVDB's layout); earlier bytes are headers and nodes.
  const int64_t data_start = grid.blind_meta_offset + int64_t(table_bytes);
  for (uint32_t k = 0; k < grid.blind_meta_count; ++k) {
    const int64_t meta_at = grid.blind_meta_offset + int64_t(k) * int64_t(sizeof(nvdb::BlindMeta));
    const auto& meta = r.at<nvdb::BlindMeta>(meta_at, "a blind data record");
    if (meta.data_class != nvdb::kBlindClassChannelArray) continue;
    const std::string name(meta.name, strnlen(meta.name, nvdb::kNameSize));
    std::optional<nvdb::ChannelDesc> desc = nvdb::parse_channel_name(name);
    // What element_count counts a row: scalars under a tilegrid name, NanoVDB elements (a Vec3f
    // is one) otherwise.
    uint64_t counted_per_row = 0;
    if (desc) {
      counted_per_row = row_elements(r, name, desc->row, itemsize(desc->dtype));
    } else if (meta.element_count % grid.value_count == 0) {
      counted_per_row = meta.element_count / grid.value_count;
      desc = nvdb::channel_of_grid_type(meta.data_type, counted_per_row);
    }
    if (!desc)
      r.fail("channel \"", printable(name), "\" holds ", meta.element_count,
             " values of NanoVDB GridType ", meta.data_type, " for ", grid.value_count,
             " indices; expected a tilegrid channel name or a scalar/vector float or integer "
             "type with a whole number of values per index");
    uint64_t expected;
    if (__builtin_mul_overflow(counted_per_row, grid.value_count, &expected) ||
        meta.element_count != expected)
      r.fail("channel \"", printable(name), "\" holds ", meta.element_count, " values; expected ",
             counted_per_row, " for each of ", grid.value_count, " indices");
    const uint64_t row_bytes =  // < 2^63: row_elements checks
        row_elements(r, name, desc->row, itemsize(desc->dtype)) * itemsize(desc->dtype);
    if (row_bytes > 0 && grid.value_count > r.size() / row_bytes)
      r.fail("channel \"", printable(name), "\" would need ", grid.value_count, " rows of ",
             row_bytes, " bytes, more than the grid's ", r.size(), " bytes");
    const int64_t data_at = r.add(meta_at, meta.data_offset, "channel data");
    if (data_at < data_start)
      r.fail("channel \"", printable(name), "\" places its data at byte offset ", data_at,
             " (record offset ", meta.data_offset,
             "), before the end of the blind data records at ", data_start,
             ": the file is corrupt");
    const std::byte* rows = r.bytes(data_at, grid.value_count * row_bytes, "channel data");
    out.channels.push_back({*desc, size_t(row_bytes), rows});
  }
}

// fVDB's blind records: "fvdb_jdata" on grids of values, holding the saved feature tensor's
// shape as int64 [rdim, N, d1, ...]; "fvdb_jdata<dtype>" on index grids of class TensorGrid,
// holding that shape and then the N rows, in index order (row = index - 1).
struct FvdbRecord {
  std::string dtype;  // after "fvdb_jdata"; empty on grids of values
  int64_t voxels = 0;
  Shape row;
  const std::byte* rows = nullptr;  // just past the shape
  uint64_t rows_bytes = 0;          // bytes from `rows` to the record's end
};

std::optional<FvdbRecord> read_fvdb_record(const GridReader& r, const nvdb::GridHeader& grid,
                                           uint32_t version) {
  for (uint32_t k = 0; k < grid.blind_meta_count; ++k) {
    const int64_t meta_at = grid.blind_meta_offset + int64_t(k) * int64_t(sizeof(nvdb::BlindMeta));
    const auto& meta = r.at<nvdb::BlindMeta>(meta_at, "a blind data record");
    const std::string name(meta.name, strnlen(meta.name, nvdb::kNameSize));
    constexpr std::string_view kPrefix = "fvdb_jdata";
    if (meta.data_class != 0 || !name.starts_with(kPrefix)) continue;
    // From 32.5 on a record gives its element size (fVDB: 8 for the shape, 1 for bytes).
    const uint64_t element =
        nvdb::version_minor(version) >= nvdb::kFirstOnIndexMinor ? meta.flags : 1;
    const uint64_t bytes = checked_mul(r, meta.element_count, element, "an fvdb_jdata record");
    const std::byte* data = r.bytes(r.add(meta_at, meta.data_offset, "an fvdb_jdata record"), bytes,
                                    "an fvdb_jdata record");
    FvdbRecord out;
    out.dtype = name.substr(kPrefix.size());
    int64_t rdim = 0;
    if (bytes >= 8) std::memcpy(&rdim, data, 8);
    if (rdim < 1 || rdim >= Shape::kMaxDims || uint64_t(rdim + 1) * 8 > bytes)
      r.fail("its blind record \"", printable(name), "\" gives a tensor of ", rdim,
             " dimensions in ", int64_t(bytes), " bytes: the file is corrupt");
    std::vector<int64_t> shape(static_cast<size_t>(rdim));
    std::memcpy(shape.data(), data + 8, size_t(rdim) * 8);
    for (const int64_t d : shape)
      if (d < 0) r.fail("its blind record \"", printable(name), "\" gives a negative extent");
    out.voxels = shape[0];
    for (size_t d = 1; d < shape.size(); ++d) out.row.push_back(shape[d]);
    out.rows = data + (rdim + 1) * 8;
    out.rows_bytes = bytes - uint64_t(rdim + 1) * 8;
    return out;
  }
  return std::nullopt;
}

// The features of an fVDB TensorGrid: rows of `dtype` and shape `row` for indices 1..N.
void read_fvdb_tensor(const GridReader& r, const FvdbRecord& rec, ParsedGrid& out) {
  std::optional<DType> dtype;
  for (DType d : nvdb::kAllDTypes)
    if (name(d) == rec.dtype) dtype = d;
  if (!dtype)
    r.fail("its features are fVDB tensors of dtype \"", printable(rec.dtype),
           "\"; tilegrid reads bool, uint8, int32, int64, float16, bfloat16, float32 and "
           "float64");
  const int64_t voxels = int64_t(out.index.size());
  if (rec.voxels != voxels)
    r.fail("its fVDB tensor has ", rec.voxels, " rows for ", voxels,
           " active voxels: the file is corrupt");
  const uint64_t row_bytes =
      row_elements(r, "fvdb_jdata", rec.row, itemsize(*dtype)) * itemsize(*dtype);
  if (row_bytes > 0 && uint64_t(voxels) > rec.rows_bytes / row_bytes)
    r.fail("its fVDB tensor needs ", voxels, " rows of ", row_bytes, " bytes, its record holds ",
           int64_t(rec.rows_bytes), ": the file is corrupt");
  // Rows follow the index order from 1: every voxel's index must name one of the N rows.
  for (const uint64_t index : out.index)
    if (index > uint64_t(voxels))
      r.fail("voxel index ", index, " has no row among the fVDB tensor's ", voxels,
             " (its grid numbers values other than the voxels': statistics or tiles)");
  out.channels.push_back({{*dtype, rec.row}, size_t(row_bytes), rec.rows, 1});
}

// Grids of values: the one channel's per-voxel shape from fVDB's record, where there is one
// (a Float grid saved from a [N, 1] tensor reads back as [N, 1]).
void apply_fvdb_shape(const GridReader& r, const FvdbRecord& rec, ParsedGrid& out) {
  nvdb::ChannelDesc& desc = out.channels.front().desc;
  int64_t have = 1, want = 1;
  for (const int64_t d : desc.row) have *= d;
  for (const int64_t d : rec.row)
    if (__builtin_mul_overflow(want, d, &want)) want = -1;
  if (rec.voxels != int64_t(out.index.size()) || want != have)
    r.fail("its fVDB record gives features of shape [", rec.voxels, ", ", rec.row, "] for ",
           int64_t(out.index.size()), " voxels of ", have, " values each: the file is corrupt");
  desc.row = rec.row;
}

// The channel a grid of values of this GridType becomes, and its walk; false for other types.
bool walk_grid_of_values(const GridReader& r, const nvdb::GridHeader& grid, ParsedGrid& out) {
  using nvdb::VecOf;
  switch (nvdb::GridType(grid.grid_type)) {
    case nvdb::GridType::Float:
      return walk_value_tree<float, float>(r, grid, {DType::Float32, {}}, out), true;
    case nvdb::GridType::Double:
      return walk_value_tree<double, double>(r, grid, {DType::Float64, {}}, out), true;
    case nvdb::GridType::Int32:
      return walk_value_tree<int32_t, float>(r, grid, {DType::Int32, {}}, out), true;
    case nvdb::GridType::Int64:
      return walk_value_tree<int64_t, double>(r, grid, {DType::Int64, {}}, out), true;
    case nvdb::GridType::UInt8:
      return walk_value_tree<uint8_t, float>(r, grid, {DType::UInt8, {}}, out), true;
    case nvdb::GridType::Vec3f:
      return walk_value_tree<VecOf<float, 3>, float>(r, grid, {DType::Float32, {3}}, out), true;
    case nvdb::GridType::Vec3d:
      return walk_value_tree<VecOf<double, 3>, double>(r, grid, {DType::Float64, {3}}, out), true;
    case nvdb::GridType::Vec4f:
      return walk_value_tree<VecOf<float, 4>, float>(r, grid, {DType::Float32, {4}}, out), true;
    case nvdb::GridType::Vec4d:
      return walk_value_tree<VecOf<double, 4>, double>(r, grid, {DType::Float64, {4}}, out), true;
    case nvdb::GridType::RGBA8:
      return walk_value_tree<VecOf<uint8_t, 4>, float>(r, grid, {DType::UInt8, {4}}, out), true;
    default:
      return false;
  }
}

ParsedGrid parse_grid(const std::string& path, const std::string& name, uint64_t size,
                      uint32_t file_version, std::vector<Block> buffer) {
  ParsedGrid out;
  out.name = name;
  const GridReader r(path, name, buffer.front().bytes, size);
  const auto& grid = r.at<nvdb::GridHeader>(0, "the grid header");
  if (grid.magic != nvdb::kMagic && grid.magic != nvdb::kMagicGrid)
    r.fail(
        "its buffer does not start with the magic number \"NanoVDB0\" or \"NanoVDB1\": the "
        "file is corrupt");
  if (grid.grid_size != size)
    r.fail("its header gives ", int64_t(grid.grid_size), " bytes, its file record ", int64_t(size),
           ": the file is corrupt");
  // A grid keeps the version of the NanoVDB that made it, which may be older than the writer's.
  if (nvdb::version_major(grid.version) != nvdb::kMajor ||
      nvdb::version_minor(grid.version) > nvdb::kNewestMinor)
    r.fail("its header gives NanoVDB version ", nvdb::version_major(grid.version), ".",
           nvdb::version_minor(grid.version), " (the file ", nvdb::version_major(file_version), ".",
           nvdb::version_minor(file_version), "); tilegrid reads ", nvdb::kMajor, ".0 to ",
           nvdb::kMajor, ".", nvdb::kNewestMinor);
  const bool from_32_5 = nvdb::version_minor(grid.version) >= nvdb::kFirstOnIndexMinor;
  const auto type = nvdb::GridType(grid.grid_type);
  read_transform(r, grid.map, out);
  if (type == nvdb::GridType::Index || (type == nvdb::GridType::OnIndex && from_32_5)) {
    check_head_checksum<IndexTree>(r, grid);
    if (grid.value_count == 0)
      r.fail("its value count is 0; an index grid counts at least index 0");
    const IndexKind kind = !from_32_5                        ? IndexKind::Sparse
                           : type == nvdb::GridType::OnIndex ? IndexKind::OnIndex
                                                             : IndexKind::Dense;
    walk_index_tree(r, grid, kind, out);
    read_channels(r, grid, out);
    if (auto rec = read_fvdb_record(r, grid, grid.version); rec && !rec->dtype.empty())
      read_fvdb_tensor(r, *rec, out);
  } else {
    const bool walked = walk_grid_of_values(r, grid, out);
    if (!walked)
      r.fail("it is a grid of NanoVDB GridType ", grid.grid_type,
             "; tilegrid reads index grids (Index, 19; OnIndex, 20, from NanoVDB 32.5 on) and "
             "grids of Float, Double, Int32, Int64, UInt8, Vec3f, Vec3d, Vec4f, Vec4d and "
             "RGBA8 values");
    if (auto rec = read_fvdb_record(r, grid, grid.version); rec && rec->dtype.empty())
      apply_fvdb_shape(r, *rec, out);
  }
  out.buffer = std::move(buffer);
  return out;
}

class FileReader {
 public:
  explicit FileReader(const std::string& path) : path_(path), is_(path, std::ios::binary) {
    TG_CHECK(is_.is_open(), kOp, ": cannot open \"", path,
             "\" for reading (no such file, or no "
             "permission)");
    is_.seekg(0, std::ios::end);
    size_ = uint64_t(is_.tellg());
    is_.seekg(0);
  }

  uint64_t left() const { return size_ - position_; }
  uint64_t size() const { return size_; }

  void read(void* dst, uint64_t bytes, const char* what) {
    if (bytes > left())
      fail("the file ends inside ", what, " (", int64_t(bytes), " bytes at byte offset ",
           int64_t(position_), ", file size ", int64_t(size_), "): the file is truncated");
    is_.read(static_cast<char*>(dst), std::streamsize(bytes));
    TG_CHECK(is_.good(), kOp, ": reading \"", path_, "\" failed at byte offset ",
             int64_t(position_));
    position_ += bytes;
  }

  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw ValueError(detail::concat(kOp, ": \"", path_, "\": ", args...));
  }

 private:
  const std::string& path_;
  std::ifstream is_;
  uint64_t size_ = 0, position_ = 0;
};

// One grid's buffer as it is in memory: read as is, or decompressed chunk by chunk.
std::vector<Block> read_grid_bytes(FileReader& file, uint16_t codec, const nvdb::FileGridMeta& meta,
                                   const std::string& name) {
  // zlib and LZ4 expand at most ~1000-fold (runs of zeros): a larger claim is a corrupt record,
  // refused before it is allocated.
  constexpr uint64_t kMaxRatio = 4096;
  const bool compressed = codec != nvdb::kCodecNone;
  if (meta.grid_size < sizeof(nvdb::GridHeader) || meta.file_size > file.left() ||
      (compressed ? meta.grid_size / kMaxRatio > meta.file_size : meta.grid_size != meta.file_size))
    file.fail("grid \"", printable(name), "\" claims ", meta.grid_size, " bytes (", meta.file_size,
              " on disk) with ", file.left(),
              " bytes left in the file (the file is truncated or corrupt)");
  std::vector<Block> buffer(nvdb::align_up(meta.grid_size) / nvdb::kAlignment);
  std::byte* out = buffer.front().bytes;
  if (!compressed) {
    file.read(out, meta.grid_size, "a grid");
    return buffer;
  }
  uint64_t done = 0, on_disk = 0;
  std::vector<std::byte> chunk;
  while (done < meta.grid_size) {
    uint64_t chunk_size = 0;
    file.read(&chunk_size, sizeof(chunk_size), "a compressed chunk's size");
    on_disk += sizeof(chunk_size);
    if (chunk_size > file.left() || chunk_size > meta.file_size - std::min(on_disk, meta.file_size))
      file.fail("grid \"", printable(name), "\" has a compressed chunk of ", chunk_size,
                " bytes, more than its record's ", meta.file_size,
                " bytes on disk: the file is truncated or corrupt");
    chunk.resize(chunk_size);
    file.read(chunk.data(), chunk_size, "a compressed chunk");
    on_disk += chunk_size;
    const uint64_t plain = codec == nvdb::kCodecZip
                               ? meta.grid_size
                               : std::min(nvdb::kCodecChunk, meta.grid_size - done);
    const std::string error =
        nvdb::decompress(codec, chunk.data(), chunk.size(), out + done, plain);
    if (!error.empty())
      file.fail("grid \"", printable(name), "\": decompressing its ", nvdb::codec_name(codec),
                " chunk at byte ", int64_t(done), " failed: ", error, ": the file is corrupt");
    done += plain;
  }
  if (on_disk != meta.file_size)
    file.fail("grid \"", printable(name), "\" takes ", on_disk, " bytes on disk, its record gives ",
              meta.file_size, ": the file is corrupt");
  return buffer;
}

std::vector<ParsedGrid> parse_file(const std::string& path) {
  FileReader file(path);
  if (file.size() == 0) file.fail("the file is empty; expected a NanoVDB file header");
  std::vector<ParsedGrid> grids;
  while (file.left() > 0) {
    nvdb::FileHeader header;
    file.read(&header, sizeof(header), "a segment header");
    if (header.magic == nvdb::kMagicGrid)
      file.fail(
          "it holds a bare NanoVDB grid buffer (magic number \"NanoVDB1\"), not a NanoVDB "
          "file: write it with NanoVDB's io::writeGrid");
    if (header.magic != nvdb::kMagic && header.magic != nvdb::kMagicFile) {
      char text[9] = {};
      std::memcpy(text, &header.magic, 8);
      for (char& c : text)
        if (c && (c < 32 || c > 126)) c = '?';
      file.fail(
          "not a NanoVDB file: expected the magic number \"NanoVDB0\" or \"NanoVDB2\", got \"",
          text, "\"", grids.empty() ? "" : " (after the first segment)");
    }
    if (nvdb::version_major(header.version) != nvdb::kMajor)
      file.fail("written in NanoVDB file format ", nvdb::version_major(header.version), ".",
                nvdb::version_minor(header.version), "; tilegrid reads major version ",
                nvdb::kMajor);
    if (nvdb::version_minor(header.version) > nvdb::kNewestMinor)
      file.fail("written in NanoVDB file format ", nvdb::kMajor, ".",
                nvdb::version_minor(header.version), "; tilegrid reads ", nvdb::kMajor, ".0 to ",
                nvdb::kMajor, ".", nvdb::kNewestMinor);
    if (header.codec != nvdb::kCodecNone && header.codec != nvdb::kCodecZip &&
        header.codec != nvdb::kCodecBlosc)
      file.fail("its segment header names codec ", header.codec,
                "; NanoVDB's are 0 (none), 1 (ZIP) and 2 (BLOSC): the file is corrupt");
    if (!nvdb::codec_available(header.codec))
      file.fail("its grids are compressed with ", nvdb::codec_name(header.codec),
                ", and this build of tilegrid was made without ", nvdb::codec_library(header.codec),
                ": install it and rebuild tilegrid, or save the grids uncompressed");
    if (uint64_t(header.grid_count) * sizeof(nvdb::FileGridMeta) > file.left())
      file.fail("a segment header counts ", header.grid_count, " grids, whose records alone (",
                sizeof(nvdb::FileGridMeta), " bytes each) take more than the ", file.left(),
                " bytes left: the file is truncated or corrupt");
    std::vector<nvdb::FileGridMeta> metas(header.grid_count);
    std::vector<std::string> names;
    for (nvdb::FileGridMeta& meta : metas) {
      file.read(&meta, sizeof(meta), "a grid record");
      if (meta.name_size == 0 || meta.name_size > file.left())
        file.fail("a grid record gives a name of ", int64_t(meta.name_size),
                  " bytes, more than the file holds: the file is corrupt");
      std::string name(meta.name_size, '\0');
      file.read(name.data(), meta.name_size, "a grid name");
      name.resize(strnlen(name.c_str(), name.size()));
      if (!is_utf8(name))
        file.fail("grid name \"", printable(name),
                  "\" is not UTF-8 text; tilegrid reads grid names as UTF-8 (as save writes them)");
      names.push_back(std::move(name));
    }
    for (size_t g = 0; g < metas.size(); ++g) {
      const nvdb::FileGridMeta& meta = metas[g];
      std::vector<Block> buffer = read_grid_bytes(file, header.codec, meta, names[g]);
      grids.push_back(
          parse_grid(path, names[g], meta.grid_size, header.version, std::move(buffer)));
    }
  }
  return grids;
}

}  // namespace

NvdbContents load_nvdb(const std::string& path) {
  const std::vector<ParsedGrid> grids = parse_file(path);

  std::vector<int64_t> offsets{0};
  for (const ParsedGrid& g : grids) offsets.push_back(offsets.back() + int64_t(g.index.size()));
  const int64_t total = offsets.back();
  Tensor ijk = Tensor::empty({total, 3}, DType::Int32, Device::cpu());
  Tensor joffsets = Tensor::empty({int64_t(offsets.size())}, DType::Int64, Device::cpu());
  std::copy(offsets.begin(), offsets.end(), static_cast<int64_t*>(joffsets.data()));
  std::vector<Vec3d> sizes, origins;
  for (size_t b = 0; b < grids.size(); ++b) {
    std::copy(grids[b].ijk.begin(), grids[b].ijk.end(),
              static_cast<int32_t*>(ijk.data()) + 3 * offsets[b]);
    sizes.push_back(grids[b].voxel_size);
    origins.push_back(grids[b].origin);
  }
  const JaggedTensor coords(ijk, joffsets);
  NvdbContents out{GridBatch::from_ijk(coords, sizes, origins), {}, {}};
  TG_CHECK_VALUE(out.grid.total_voxels() == total, kOp, ": \"", path,
                 "\": ", total - out.grid.total_voxels(),
                 " active voxels appear twice in the file's "
                 "trees: the file is corrupt");
  for (const ParsedGrid& g : grids) out.names.push_back(g.name);
  if (grids.empty()) return out;

  const std::vector<Channel>& first = grids.front().channels;
  for (const ParsedGrid& g : grids) {
    bool same = g.channels.size() == first.size();
    for (size_t k = 0; same && k < first.size(); ++k)
      same = g.channels[k].desc.dtype == first[k].desc.dtype &&
             g.channels[k].desc.row == first[k].desc.row;
    if (same) continue;
    std::string have, want;
    for (const Channel& c : g.channels) have.append(" ").append(channel_text(c.desc));
    for (const Channel& c : first) want.append(" ").append(channel_text(c.desc));
    throw ValueError(detail::concat(kOp, ": \"", path, "\": grid \"", g.name, "\" has channels [",
                                    have, " ] but grid \"", grids.front().name, "\" has [", want,
                                    " ]; the grids of one batch must carry the same features"));
  }

  const Tensor rows = out.grid.ijk_to_index(coords);
  const int64_t* row = static_cast<const int64_t*>(rows.data());
  for (size_t k = 0; k < first.size(); ++k) {
    Shape shape{total};
    for (int64_t d : first[k].desc.row) shape.push_back(d);
    Tensor feature = Tensor::empty(shape, first[k].desc.dtype, Device::cpu());
    std::byte* dst = static_cast<std::byte*>(feature.data());
    const size_t row_bytes = first[k].row_bytes;
    for (size_t b = 0; b < grids.size() && row_bytes > 0; ++b) {
      const Channel& c = grids[b].channels[k];
      for (size_t v = 0; v < grids[b].index.size(); ++v)
        std::memcpy(dst + size_t(row[offsets[b] + int64_t(v)]) * row_bytes,
                    c.rows + (grids[b].index[v] - c.first_index) * row_bytes, row_bytes);
    }
    out.features.push_back(std::move(feature));
  }
  return out;
}

}  // namespace tilegrid::grid
