#pragma once
// The sparse voxel index tree (the layout of an fVDB/NanoVDB index grid, written here): a root
// table of upper nodes (32^3 children each), lower nodes (16^3 children), and leaves of 8^3
// voxels. Nodes store bit masks of their active children and running popcounts, so the
// position of a child among its siblings, and of an active voxel in the feature tensor, is a
// rank query: no per-voxel pointers, about 1-2 bytes per active voxel on surface data.
//
// Active voxels are numbered per grid, upper node by upper node (in (i, j, k) order of their
// origins), then lower node, leaf and voxel by their position in the parent, where a position
// is ((i * n) + j) * n + k for a node of n^3 children. That is the row order of a grid's
// features; grid b's rows follow grid b-1's.
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::grid {

struct Coord {
  int32_t i = 0, j = 0, k = 0;
};

constexpr int kLeafLog2 = 3;            // 8^3 voxels a leaf
constexpr int kLowerLog2 = 4;           // 16^3 leaves a lower node (128^3 voxels)
constexpr int kUpperLog2 = 5;           // 32^3 lower nodes an upper node (4096^3 voxels)
constexpr int kLowerShift = kLeafLog2;  // coordinate bits below a lower child
constexpr int kUpperShift = kLeafLog2 + kLowerLog2;   // ... below an upper child
constexpr int kRootShift = kUpperShift + kUpperLog2;  // ... below a root child (12)

// Position of the child that holds `c` in a node whose children span 2^shift voxels and
// which has 2^log2 children per axis.
TG_HOST_DEVICE uint32_t child_position(Coord c, int shift, int log2) {
  const uint32_t m = (1u << log2) - 1;
  return ((uint32_t(c.i >> shift) & m) << (2 * log2)) | ((uint32_t(c.j >> shift) & m) << log2) |
         (uint32_t(c.k >> shift) & m);
}

TG_HOST_DEVICE int popcount64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}

// A node's child mask with running popcounts: rank(n) = active children before position n.
template <int LOG2>
struct ChildMask {
  static constexpr int kChildren = 1 << (3 * LOG2);
  static constexpr int kWords = kChildren / 64;
  uint64_t bits[kWords];
  uint32_t before[kWords];  // set bits in words [0, w)

  TG_HOST_DEVICE bool test(uint32_t n) const { return (bits[n >> 6] >> (n & 63)) & 1u; }
  TG_HOST_DEVICE uint32_t rank(uint32_t n) const {
    const uint64_t below = bits[n >> 6] & ((uint64_t(1) << (n & 63)) - 1);
    return before[n >> 6] + uint32_t(popcount64(below));
  }
};

struct LeafNode {
  Coord origin;  // multiple of 8
  int32_t unused = 0;
  int64_t first_voxel;  // row of this leaf's first active voxel in the batch's features
  ChildMask<kLeafLog2> voxels;
};

struct LowerNode {
  Coord origin;  // multiple of 128
  int32_t unused = 0;
  int64_t first_leaf;  // index of the first child in the leaf array
  ChildMask<kLowerLog2> leaves;
};

struct UpperNode {
  Coord origin;  // multiple of 4096
  int32_t unused = 0;
  int64_t first_lower;
  ChildMask<kUpperLog2> lowers;
};

// Lexicographic order of upper-node origins, the order of the root table.
TG_HOST_DEVICE bool root_less(Coord a, Coord b) {
  if (a.i != b.i) return a.i < b.i;
  if (a.j != b.j) return a.j < b.j;
  return a.k < b.k;
}

TG_HOST_DEVICE Coord root_origin(Coord c) {
  return {int32_t(uint32_t(c.i >> kRootShift) << kRootShift),
          int32_t(uint32_t(c.j >> kRootShift) << kRootShift),
          int32_t(uint32_t(c.k >> kRootShift) << kRootShift)};
}

// Plain pointers to a batch's nodes, as kernels and the CPU code take them.
struct TreeView {
  const UpperNode* uppers;
  const LowerNode* lowers;
  const LeafNode* leaves;
  const int64_t* upper_offsets;  // [B+1]: grid b's upper nodes are [offsets[b], offsets[b+1])

  // Row of voxel `c` of grid `b` in the batch's features, or -1 if it is not active.
  TG_HOST_DEVICE int64_t index_of(int64_t b, Coord c) const {
    return index_in_leaf(leaf_of(b, c), c);
  }

  // The leaf of grid `b` that holds `c`'s 8^3 block, or null where there is none.
  TG_HOST_DEVICE const LeafNode* leaf_of(int64_t b, Coord c) const {
    return leaf_in(lower_of(b, c), c);
  }

  // The leaf of `lower` (the lower node of c's 128^3 block, or null) that holds c's 8^3 block.
  TG_HOST_DEVICE const LeafNode* leaf_in(const LowerNode* lower, Coord c) const {
    if (lower == nullptr) return nullptr;
    const uint32_t ln = child_position(c, kLowerShift, kLowerLog2);
    if (!lower->leaves.test(ln)) return nullptr;
    return &leaves[lower->first_leaf + lower->leaves.rank(ln)];
  }

  // The lower node of grid `b` that holds `c`'s 128^3 block, or null where there is none.
  TG_HOST_DEVICE const LowerNode* lower_of(int64_t b, Coord c) const {
    int64_t lo = upper_offsets[b], hi = upper_offsets[b + 1];
    const Coord key = root_origin(c);
    while (lo < hi) {  // binary search of the sorted root table
      const int64_t mid = (lo + hi) / 2;
      if (root_less(uppers[mid].origin, key))
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo == upper_offsets[b + 1]) return nullptr;
    const UpperNode& upper = uppers[lo];
    if (upper.origin.i != key.i || upper.origin.j != key.j || upper.origin.k != key.k) return nullptr;
    const uint32_t un = child_position(c, kUpperShift, kUpperLog2);
    if (!upper.lowers.test(un)) return nullptr;
    return &lowers[upper.first_lower + upper.lowers.rank(un)];
  }

  // Row of `c` within `leaf` (the leaf of its block, or null), -1 where it is not active.
  TG_HOST_DEVICE static int64_t index_in_leaf(const LeafNode* leaf, Coord c) {
    if (leaf == nullptr) return -1;
    const uint32_t vn = child_position(c, 0, kLeafLog2);
    if (!leaf->voxels.test(vn)) return -1;
    return leaf->first_voxel + leaf->voxels.rank(vn);
  }
};

// index_of for one thread's run of nearby lookups (a ray's field samples, a cell's 8 corners, a
// voxel's stencil), cached a level at a time: the last 8^3 block's leaf (or its absence) and the
// last 128^3 block's lower node (or its absence) are kept, so that a lookup in the same leaf
// skips the root table, the upper and the lower node (6 dependent loads down to 2), and one in
// another leaf of the same lower node skips the root table and the upper node.
struct CachedLookup {
  const TreeView& tree;
  int64_t grid;
  Coord block{0, 0, 0};        // the cached leaf's 8^3 block
  Coord lower_block{0, 0, 0};  // the cached lower node's 128^3 block
  bool cached = false, lower_cached = false;
  const LeafNode* leaf = nullptr;
  const LowerNode* lower = nullptr;

  TG_HOST_DEVICE CachedLookup(const TreeView& t, int64_t b) : tree(t), grid(b) {}

  TG_HOST_DEVICE int64_t index_of(Coord c) {
    const Coord origin = aligned(c, ~((1u << kLeafLog2) - 1));
    if (!cached || !same(origin, block)) {
      const Coord lower_origin = aligned(c, ~((1u << kUpperShift) - 1));
      if (!lower_cached || !same(lower_origin, lower_block)) {
        lower = tree.lower_of(grid, c);
        lower_block = lower_origin;
        lower_cached = true;
      }
      leaf = tree.leaf_in(lower, c);
      block = origin;
      cached = true;
    }
    return TreeView::index_in_leaf(leaf, c);
  }

 private:
  // The origin of c's block (mask ~(size - 1); two's complement, so negative coordinates
  // round down as the tree's blocks do).
  TG_HOST_DEVICE static Coord aligned(Coord c, uint32_t mask) {
    return {int32_t(uint32_t(c.i) & mask), int32_t(uint32_t(c.j) & mask), int32_t(uint32_t(c.k) & mask)};
  }
  TG_HOST_DEVICE static bool same(Coord a, Coord b) { return a.i == b.i && a.j == b.j && a.k == b.k; }
};

}  // namespace tilegrid::grid
