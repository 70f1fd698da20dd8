// CPU construction of a GridBatch from integer coordinates. The coordinates of each grid are
// sorted in tree order (upper node, then position in it, lower position, voxel position) and
// deduplicated; one walk over the sorted list then creates the nodes depth first, which
// leaves each node's children contiguous and in position order, as the rank queries need.
// The CUDA build will do the same with a radix sort and parallel scans.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "grid/grid_args.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/grid/grid_batch.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/grid_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

constexpr const char* kOp = "GridBatch.from_ijk";

struct TreeKey {
  Coord root;               // origin of the upper node
  uint32_t upper_position;  // lower child within the upper node
  uint32_t lower_position;  // leaf within the lower node
  uint32_t leaf_position;   // voxel within the leaf

  auto tie() const {
    return std::tie(root.i, root.j, root.k, upper_position, lower_position, leaf_position);
  }
  bool operator<(const TreeKey& o) const { return tie() < o.tie(); }
  bool operator==(const TreeKey& o) const { return tie() == o.tie(); }
};

TreeKey key_of(Coord c) {
  return {root_origin(c), child_position(c, kUpperShift, kUpperLog2),
          child_position(c, kLowerShift, kLowerLog2), child_position(c, 0, kLeafLog2)};
}

template <int LOG2>
void finish_mask(ChildMask<LOG2>& mask) {
  uint32_t running = 0;
  for (int w = 0; w < ChildMask<LOG2>::kWords; ++w) {
    mask.before[w] = running;
    running += uint32_t(popcount64(mask.bits[w]));
  }
}

template <int LOG2>
void set_bit(ChildMask<LOG2>& mask, uint32_t n) {
  mask.bits[n >> 6] |= uint64_t(1) << (n & 63);
}

// Origin of the child at `position` of a node at `origin` whose children span 2^shift voxels.
Coord child_origin(Coord origin, uint32_t position, int shift, int log2) {
  const uint32_t m = (1u << log2) - 1;
  return {origin.i + int32_t(((position >> (2 * log2)) & m) << shift),
          origin.j + int32_t(((position >> log2) & m) << shift),
          origin.k + int32_t((position & m) << shift)};
}

Tensor int64_vector(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, DType::Int64, Device::cpu());
  std::copy(values.begin(), values.end(), static_cast<int64_t*>(t.data()));
  return t;
}

}  // namespace

GridBatch GridBatch::from_ijk(const JaggedTensor& ijk, const std::vector<Vec3d>& voxel_sizes,
                              const std::vector<Vec3d>& origins, Stream stream) {
  const TensorView& data = ijk.jdata();
  check_dtype(kOp, "ijk", data, {DType::Int32});
  check_ndim(kOp, "ijk", data, 2);
  TG_CHECK_VALUE(data.size(1) == 3, kOp, ": ijk must be [N, 3], got shape ", data.shape);
  check_contiguous(kOp, "ijk", data);
  const int64_t grids = ijk.num_tensors();
  TG_CHECK_VALUE(grids < (int64_t(1) << 24), kOp, ": at most 2^24 grids a batch, got ", grids);

  GridBatch batch;
  batch.voxel_sizes_ = per_grid(kOp, voxel_sizes, grids, {1, 1, 1}, "voxel_sizes", true);
  batch.origins_ = per_grid(kOp, origins, grids, {0, 0, 0}, "origins", false);
  const std::vector<VoxelTransform> transforms = transforms_of(batch.voxel_sizes_, batch.origins_);

  if (data.device.is_cuda()) {
#ifdef TILEGRID_WITH_CUDA
    cuda::BuiltTree tree = cuda::build_tree(data.data_ptr<const int32_t>(),
                                            ijk.joffsets().view().data_ptr<const int64_t>(), grids,
                                            data.size(0), data.device.index, stream);
    batch.device_ = data.device;
    batch.uppers_ = tree.uppers;
    batch.lowers_ = tree.lowers;
    batch.leaves_ = tree.leaves;
    batch.upper_offsets_ = tree.upper_offsets;
    batch.voxel_offsets_ = tree.voxel_offsets;
    batch.voxel_counts_total_ = tree.num_voxels;
    if (grids == 1) {  // known on the host already: no read-back (a wait)
      batch.voxel_offsets_host_ = {0, tree.num_voxels};
    } else {
      Tensor host_offsets = tree.voxel_offsets.to(Device::cpu(), stream);
      const int64_t* h = static_cast<const int64_t*>(host_offsets.data());
      batch.voxel_offsets_host_.assign(h, h + grids + 1);
    }
    batch.transforms_ = to_bytes(transforms, data.device, stream);
    return batch;
#else
    throw Error(detail::concat(kOp, ": tilegrid was built without CUDA"));
#endif
  }

  const int32_t* xyz = data.data_ptr<const int32_t>();
  const int64_t* offsets = ijk.joffsets().view().data_ptr<const int64_t>();
  std::vector<UpperNode> uppers;
  std::vector<LowerNode> lowers;
  std::vector<LeafNode> leaves;
  std::vector<int64_t> upper_offsets{0}, voxel_offsets{0};
  int64_t voxel_count = 0;

  for (int64_t b = 0; b < grids; ++b) {
    std::vector<TreeKey> keys;
    keys.reserve(size_t(offsets[b + 1] - offsets[b]));
    for (int64_t n = offsets[b]; n < offsets[b + 1]; ++n)
      keys.push_back(key_of({xyz[3 * n], xyz[3 * n + 1], xyz[3 * n + 2]}));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

    const TreeKey* previous = nullptr;
    for (const TreeKey& key : keys) {
      const bool new_upper =
          !previous || !(previous->root.i == key.root.i && previous->root.j == key.root.j &&
                         previous->root.k == key.root.k);
      const bool new_lower = new_upper || previous->upper_position != key.upper_position;
      const bool new_leaf = new_lower || previous->lower_position != key.lower_position;
      if (new_upper) {
        UpperNode& u = uppers.emplace_back(UpperNode{});  // all masks zero
        u.origin = key.root;
        u.first_lower = int64_t(lowers.size());
      }
      if (new_lower) {
        UpperNode& u = uppers.back();
        set_bit(u.lowers, key.upper_position);
        LowerNode& l = lowers.emplace_back(LowerNode{});
        l.origin = child_origin(u.origin, key.upper_position, kUpperShift, kUpperLog2);
        l.first_leaf = int64_t(leaves.size());
      }
      if (new_leaf) {
        LowerNode& l = lowers.back();
        set_bit(l.leaves, key.lower_position);
        LeafNode& leaf = leaves.emplace_back(LeafNode{});
        leaf.origin = child_origin(l.origin, key.lower_position, kLowerShift, kLowerLog2);
        leaf.first_voxel = voxel_count;
      }
      set_bit(leaves.back().voxels, key.leaf_position);
      ++voxel_count;
      previous = &key;
    }
    upper_offsets.push_back(int64_t(uppers.size()));
    voxel_offsets.push_back(voxel_count);
  }
  for (UpperNode& u : uppers) finish_mask(u.lowers);
  for (LowerNode& l : lowers) finish_mask(l.leaves);
  for (LeafNode& leaf : leaves) finish_mask(leaf.voxels);

  batch.uppers_ = to_bytes(uppers);
  batch.lowers_ = to_bytes(lowers);
  batch.leaves_ = to_bytes(leaves);
  batch.upper_offsets_ = int64_vector(upper_offsets);
  batch.voxel_offsets_ = int64_vector(voxel_offsets);
  batch.voxel_offsets_host_ = voxel_offsets;
  batch.transforms_ = to_bytes(transforms);
  batch.voxel_counts_total_ = voxel_count;
  return batch;
}

}  // namespace tilegrid::grid
