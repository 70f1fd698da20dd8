#pragma once
// The binary layout of NanoVDB files (internal to the .nvdb reader and writer).
//
// Written from the NanoVDB headers of 32.4.2 (OpenVDB 10.0.1, Debian bookworm's
// libnanovdb-dev) and 32.9.2 (OpenVDB's repository, August 2026), the two formats save_nvdb
// writes; the reader takes 32.0 to 32.9. tilegrid does not include them, NanoVDB being
// optional. Sizes and offsets are asserted below; the interop test reads our 32.4 files with
// NanoVDB 32.4 itself, tests/data/nvdb/read_with_nanovdb.cpp our 32.9 files with 32.9, and
// tests/data/nvdb holds files NanoVDB 32.9 wrote the way fVDB saves grids.
//
// A file is one or more segments: a FileHeader, one FileGridMeta plus the grid's name (with
// its NUL) per grid, then the grid buffers back to back (each compressed on its own where the
// header names a codec). A grid buffer is self-contained, every pointer in it a byte offset,
// and laid out breadth first:
//
//   GridHeader | TreeHeader | RootHeader | RootTile x T | UpperNode x U | LowerNode x L |
//   Leaf x N | BlindMeta x F | blind data 0 | blind data 1 | ...
//
// Everything is little endian, and every part starts on a 32-byte boundary (NanoVDB's
// NANOVDB_DATA_ALIGNMENT), which the sizes below keep. The nodes' layout depends on the grid's
// value type (RootHeaderOf, InternalNodeOf, ValueLeafOf below); index grids' values are uint64.
//
// Index grids of 32.4 (GridType::Index) with the "sparse" leaf flag number the active voxels
// only: a voxel's value is the leaf's value offset plus its rank among the leaf's active
// voxels, and every inactive voxel reads 0, the background. Index 0 is therefore reserved, and
// active voxels are numbered from 1: index = 1 + (tilegrid row within the grid). Channel
// arrays (blind data read by NanoVDB's ChannelAccessor) are indexed the same way, so entry 0 is
// the background's value. NanoVDB 32.5 renamed this kind OnIndex (GridType 20, its leaf's
// first index moved to the word before) and gave GridType::Index the dense meaning (every voxel
// of a leaf numbered, index = offset + position): save_nvdb writes GridType::Index with sparse
// leaves only in 32.4 files, OnIndex in 32.9 ones.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tilegrid::grid::nvdb {

// "NanoVDB0" read as a little-endian uint64: the first word of a file and of every grid up to
// 32.6 (and of what save_nvdb writes). From 32.6 on NanoVDB starts a grid with "NanoVDB1" and
// a file segment with "NanoVDB2".
constexpr uint64_t kMagic = 0x304244566f6e614eULL;
constexpr uint64_t kMagicGrid = 0x314244566f6e614eULL;
constexpr uint64_t kMagicFile = 0x324244566f6e614eULL;

// Versions pack major (11 bits), minor (11) and patch (10).
constexpr uint32_t version_id(uint32_t major, uint32_t minor, uint32_t patch) {
  return major << 21 | minor << 10 | patch;
}
constexpr uint32_t version_major(uint32_t id) {
  return id >> 21;
}
constexpr uint32_t version_minor(uint32_t id) {
  return (id >> 10) & 0x7ff;
}
constexpr uint32_t kMajor = 32, kMinor = 4, kPatch = 2;
constexpr uint32_t kVersion = version_id(kMajor, kMinor, kPatch);  // what save_nvdb writes
// The reader takes 32.0 to 32.9; from 32.5 on, index grids are OnIndex / dense Index.
constexpr uint32_t kNewestMinor = 9;
constexpr uint32_t kFirstOnIndexMinor = 5;
// From 32.6.1 on, a checksum's first half covers the grid and tree headers only; before, the
// root header and root table too.
constexpr uint32_t kShortHeadChecksumFrom = version_id(32, 6, 1);

// GridType values that tilegrid reads or writes (blind-data element types included).
enum class GridType : uint32_t {
  Unknown = 0,
  Float = 1,
  Double = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Vec3f = 6,
  Vec3d = 7,
  Mask = 8,
  Half = 9,
  UInt32 = 10,
  Boolean = 11,
  RGBA8 = 12,
  Vec4f = 17,
  Vec4d = 18,
  Index = 19,
  OnIndex = 20,  // 32.5 on
  UInt8 = 26,    // 32.7 on
};
constexpr uint32_t kGridClassIndexGrid = 8;
constexpr uint32_t kBlindClassChannelArray = 4;
constexpr uint32_t kBlindSemanticUnknown = 0;
constexpr uint16_t kCodecNone = 0, kCodecZip = 1, kCodecBlosc = 2;
// A compressed grid buffer is stored as chunks of at most this many bytes before compression
// (BLOSC; ZIP takes the whole grid in one), each after its compressed size as a uint64.
constexpr uint64_t kCodecChunk = uint64_t(1) << 30;

// GridHeader::flags bits.
constexpr uint32_t kGridHasBBox = 1u << 1;
constexpr uint32_t kGridIsBreadthFirst = 1u << 5;
// Upper/lower node flags: bit 0, nothing to render (no active values); bit 1, the node holds
// active values (its bbox is valid).
constexpr uint64_t kNodeSkip = 1u << 0;
constexpr uint64_t kNodeHasActive = 1u << 1;
// Leaf flags: bit 1, the leaf's bbox is valid; bit 4, only active voxels are indexed.
constexpr uint8_t kLeafHasBBox = 1u << 1;
constexpr uint8_t kLeafSparseIndex = 1u << 4;

// A checksum with both halves "empty" means none was computed; NanoVDB's validation accepts
// it. Otherwise the low 32 bits are the CRC-32 of the grid, tree and root headers and the root
// tiles (bytes 16 onwards: magic and checksum excluded), and the high 32 bits the CRC of all
// nodes, or all ones when only that first ("partial") part was computed.
constexpr uint32_t kCrcEmpty = 0xffffffffu;
constexpr uint64_t kChecksumEmpty = ~uint64_t(0);
constexpr size_t kChecksumStart = 16;

constexpr size_t kNameSize = 256;  // grid and blind-data names, NUL included
constexpr size_t kAlignment = 32;

struct FileHeader {
  uint64_t magic;
  uint32_t version;
  uint16_t grid_count;  // grids in this segment
  uint16_t codec;       // 0: none, 1: zip, 2: blosc
};
static_assert(sizeof(FileHeader) == 16);

struct FileGridMeta {
  uint64_t grid_size;    // bytes of the grid buffer in memory
  uint64_t file_size;    // bytes on disk (== grid_size without compression)
  uint64_t name_key;     // name_hash(name)
  uint64_t voxel_count;  // active voxels
  uint32_t grid_type, grid_class;
  double world_bbox[6];  // min xyz, max xyz
  int32_t index_bbox[6];
  double voxel_size[3];
  uint32_t name_size;      // name bytes that follow this record, NUL included
  uint32_t node_count[4];  // leaves, lower, upper, root (1)
  uint32_t tile_count[3];  // active tiles in lower, upper nodes and the root
  uint16_t codec;
  uint16_t padding;  // 32.5 on: the grid's blind data count
  uint32_t version;
};
static_assert(sizeof(FileGridMeta) == 176);
static_assert(offsetof(FileGridMeta, grid_type) == 32);
static_assert(offsetof(FileGridMeta, world_bbox) == 40);
static_assert(offsetof(FileGridMeta, index_bbox) == 88);
static_assert(offsetof(FileGridMeta, voxel_size) == 112);
static_assert(offsetof(FileGridMeta, name_size) == 136);
static_assert(offsetof(FileGridMeta, codec) == 168);
static_assert(offsetof(FileGridMeta, version) == 172);

// Index-to-world transform: world = mat * ijk + vec (row-major 3x3), in float and double.
struct Map {
  float mat_f[9], inv_mat_f[9], vec_f[3], taper_f;
  double mat_d[9], inv_mat_d[9], vec_d[3], taper_d;
};
static_assert(sizeof(Map) == 264);
static_assert(offsetof(Map, mat_d) == 88);
static_assert(offsetof(Map, vec_d) == 232);

struct GridHeader {
  uint64_t magic;
  uint64_t checksum;
  uint32_t version;
  uint32_t flags;
  uint32_t grid_index;  // position of this grid in its buffer (one grid a buffer: 0)
  uint32_t grid_count;  // grids in this buffer (1)
  uint64_t grid_size;   // bytes of the whole grid buffer, blind data included
  char name[kNameSize];
  Map map;
  double world_bbox[6];
  double voxel_size[3];
  uint32_t grid_class;
  uint32_t grid_type;
  int64_t blind_meta_offset;  // from this header to the first BlindMeta
  uint32_t blind_meta_count;
  uint32_t data0;
  uint64_t value_count;  // index grids: indices in use, the background's 0 included
  uint64_t data2;
};
static_assert(sizeof(GridHeader) == 672);
static_assert(offsetof(GridHeader, checksum) == 8);
static_assert(offsetof(GridHeader, version) == 16);
static_assert(offsetof(GridHeader, grid_size) == 32);
static_assert(offsetof(GridHeader, name) == 40);
static_assert(offsetof(GridHeader, map) == 296);
static_assert(offsetof(GridHeader, world_bbox) == 560);
static_assert(offsetof(GridHeader, voxel_size) == 608);
static_assert(offsetof(GridHeader, grid_class) == 632);
static_assert(offsetof(GridHeader, blind_meta_offset) == 640);
static_assert(offsetof(GridHeader, value_count) == 656);

struct TreeHeader {
  uint64_t node_offset[4];  // from this header to the first leaf, lower, upper node and root
  uint32_t node_count[3];   // leaves, lower, upper nodes
  uint32_t tile_count[3];   // active tiles in lower, upper nodes and the root
  uint64_t voxel_count;     // active voxels
};
static_assert(sizeof(TreeHeader) == 64);

// The nodes of a tree whose values are `Value` and statistics (average, deviation) `Stats`:
// NanoVDB's FloatTraits make Stats double for values whose scalar has 8 bytes, float otherwise,
// and uint64 for index grids. Offsets follow C++ layout, as NanoVDB's structs do.
template <class Value, class Stats>
struct alignas(kAlignment) RootHeaderOf {
  int32_t bbox[6];  // active voxels, inclusive; empty: min INT32_MAX, max INT32_MIN
  uint32_t tile_count;
  Value background, minimum, maximum;
  Stats average, std_dev;
};

template <class Value>
struct alignas(kAlignment) RootTileOf {
  uint64_t key;   // root_key(origin of the upper node)
  int64_t child;  // from the RootHeader to the upper node; 0 for a value tile
  uint32_t state;
  Value value;
};

// Upper (LOG2 5) and lower (LOG2 4) nodes.
template <int LOG2, class Value, class Stats>
struct alignas(kAlignment) InternalNodeOf {
  static constexpr int kChildren = 1 << (3 * LOG2);
  union Entry {
    Value value;    // a tile's value
    int64_t child;  // from this node to the child
  };
  int32_t bbox[6];  // active voxels below, inclusive; bbox[0..2] also gives the node's origin
  uint64_t flags;
  uint64_t value_mask[kChildren / 64];  // active tiles
  uint64_t child_mask[kChildren / 64];
  Value minimum, maximum;
  Stats average, std_dev;
  alignas(kAlignment) Entry table[kChildren];
};

// A leaf holding its 512 values (grids of a value type).
template <class Value, class Stats>
struct alignas(kAlignment) ValueLeafOf {
  int32_t bbox_min[3];  // smallest active coordinate; & ~7 gives the leaf's origin
  uint8_t bbox_dif[3];  // largest minus smallest active coordinate
  uint8_t flags;
  uint64_t value_mask[8];
  Value minimum, maximum;
  Stats average, std_dev;
  alignas(kAlignment) Value values[512];
};

// Fixed-size vectors as NanoVDB stores them (Vec3f, Vec4d, ...; RGBA8 as 4 uint8).
template <class T, int N>
struct VecOf {
  T v[N];
};

// Index trees: values and statistics are uint64 indices.
using RootHeader = RootHeaderOf<uint64_t, uint64_t>;
using RootTile = RootTileOf<uint64_t>;
template <int LOG2>
using InternalNode = InternalNodeOf<LOG2, uint64_t, uint64_t>;
using UpperNode = InternalNode<5>;
using LowerNode = InternalNode<4>;
static_assert(sizeof(RootHeader) == 96);
static_assert(offsetof(RootHeader, background) == 32);
static_assert(sizeof(RootTile) == 32);
static_assert(sizeof(UpperNode) == 270400);
static_assert(offsetof(UpperNode, child_mask) == 4128);
static_assert(offsetof(UpperNode, table) == 8256);
static_assert(sizeof(LowerNode) == 33856);
static_assert(offsetof(LowerNode, child_mask) == 544);
static_assert(offsetof(LowerNode, table) == 1088);
// Typed trees, against NanoVDB 32.9's sizeof (Float, Vec3f, Vec4d).
static_assert(sizeof(RootHeaderOf<float, float>) == 64);
static_assert(sizeof(RootTileOf<VecOf<double, 4>>) == 64);
static_assert(sizeof(InternalNodeOf<4, VecOf<float, 3>, float>) == 66624);
static_assert(sizeof(ValueLeafOf<float, float>) == 2144);
static_assert(sizeof(ValueLeafOf<VecOf<double, 4>, double>) == 16544);

// The leaf of an index tree. 32.4 (sparse GridType::Index): `word[1]` is the index of the
// leaf's first active voxel (`word[0]` that of its statistics). 32.5 on (OnIndex, and dense
// Index): `word[0]` is the leaf's first index, `word[1]` a prefix sum of the mask's words.
struct IndexLeaf {
  int32_t bbox_min[3];  // smallest active coordinate; & ~7 gives the leaf's origin
  uint8_t bbox_dif[3];  // largest minus smallest active coordinate
  uint8_t flags;
  uint64_t value_mask[8];
  uint64_t word[2];
};
static_assert(sizeof(IndexLeaf) == 96);
static_assert(offsetof(IndexLeaf, flags) == 15);
static_assert(offsetof(IndexLeaf, value_mask) == 16);
static_assert(offsetof(IndexLeaf, word) == 80);

struct BlindMeta {
  int64_t data_offset;  // from this record to its data
  uint64_t element_count;
  uint32_t flags;  // 32.5 on: the bytes of one element
  uint32_t semantic;
  uint32_t data_class;
  uint32_t data_type;  // a GridType
  char name[kNameSize];
};
static_assert(sizeof(BlindMeta) == 288);
static_assert(offsetof(BlindMeta, name) == 32);

// The root table's key of the upper node holding `ijk`: 21 bits per axis, x highest.
constexpr uint64_t root_key(int32_t i, int32_t j, int32_t k) {
  return uint64_t(uint32_t(k) >> 12) | uint64_t(uint32_t(j) >> 12) << 21 |
         uint64_t(uint32_t(i) >> 12) << 42;
}

constexpr size_t align_up(size_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

// The hash NanoVDB's file index keys grid names by (FileGridMeta::name_key).
constexpr uint64_t name_hash(std::string_view name) {
  uint64_t hash = 0;
  for (unsigned char c : name) {
    const uint64_t overflow = hash >> 56;
    hash = hash * 67 + c + overflow;
  }
  return hash;
}

// CRC-32 (IEEE 802.3: reflected polynomial 0xEDB88320, all-ones start and final inversion),
// the code NanoVDB's checksums use.
struct Crc32Table {
  uint32_t entry[256];
  constexpr Crc32Table() : entry{} {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? 0xEDB88320u : 0u);
      entry[n] = c;
    }
  }
};
inline uint32_t crc32(const void* data, size_t bytes) {
  static constexpr Crc32Table table;
  uint32_t c = kCrcEmpty;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t n = 0; n < bytes; ++n) c = table.entry[(c ^ p[n]) & 0xffu] ^ (c >> 8);
  return ~c;
}

}  // namespace tilegrid::grid::nvdb
