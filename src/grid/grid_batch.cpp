// GridBatch queries on the CPU: they run TreeView's traversal, the same code a kernel runs.
#include "tilegrid/grid/grid_batch.h"

#include "tilegrid/core/checks.h"

namespace tilegrid::grid {
namespace {

template <class Node>
int64_t count(const Tensor& bytes) {
  return bytes.numel() / int64_t(sizeof(Node));
}

void require_cpu(const char* op, Device device) {
  TG_CHECK(device.is_cpu(), op, ": grids on ", device, " are not supported yet");
}

}  // namespace

int64_t GridBatch::num_voxels(int64_t grid) const {
  TG_CHECK_VALUE(grid >= 0 && grid < num_grids(), "GridBatch.num_voxels: grid ", grid,
                 " out of range for a batch of ", num_grids());
  const int64_t* offsets = voxel_offsets_.view().data_ptr<const int64_t>();
  return offsets[grid + 1] - offsets[grid];
}

int64_t GridBatch::num_upper_nodes() const {
  return count<UpperNode>(uppers_);
}
int64_t GridBatch::num_lower_nodes() const {
  return count<LowerNode>(lowers_);
}
int64_t GridBatch::num_leaves() const {
  return count<LeafNode>(leaves_);
}

int64_t GridBatch::tree_bytes() const {
  return uppers_.numel() + lowers_.numel() + leaves_.numel() +
         (upper_offsets_.numel() + voxel_offsets_.numel()) * int64_t(sizeof(int64_t));
}

TreeView GridBatch::view() const {
  return {static_cast<const UpperNode*>(uppers_.data()),
          static_cast<const LowerNode*>(lowers_.data()),
          static_cast<const LeafNode*>(leaves_.data()),
          static_cast<const int64_t*>(upper_offsets_.data())};
}

Tensor GridBatch::ijk_to_index(const JaggedTensor& ijk) const {
  constexpr const char* kOp = "GridBatch.ijk_to_index";
  const TensorView& data = ijk.jdata();
  check_dtype(kOp, "ijk", data, {DType::Int32});
  check_ndim(kOp, "ijk", data, 2);
  TG_CHECK_VALUE(data.size(1) == 3, kOp, ": ijk must be [N, 3], got shape ", data.shape);
  check_contiguous(kOp, "ijk", data);
  TG_CHECK_VALUE(ijk.num_tensors() == num_grids(), kOp, ": ijk holds ", ijk.num_tensors(),
                 " tensors but the batch has ", num_grids(), " grids");
  require_cpu(kOp, data.device);
  require_cpu(kOp, device_);

  Tensor out = Tensor::empty({data.size(0)}, DType::Int64, Device::cpu());
  const int32_t* xyz = data.data_ptr<const int32_t>();
  const int64_t* offsets = ijk.joffsets().view().data_ptr<const int64_t>();
  int64_t* index = static_cast<int64_t*>(out.data());
  const TreeView tree = view();
  for (int64_t b = 0; b < num_grids(); ++b)
    for (int64_t n = offsets[b]; n < offsets[b + 1]; ++n)
      index[n] = tree.index_of(b, {xyz[3 * n], xyz[3 * n + 1], xyz[3 * n + 2]});
  return out;
}

JaggedTensor GridBatch::ijk() const {
  require_cpu("GridBatch.ijk", device_);
  Tensor out = Tensor::empty({total_voxels(), 3}, DType::Int32, Device::cpu());
  int32_t* xyz = static_cast<int32_t*>(out.data());
  const LeafNode* leaves = view().leaves;
  for (int64_t l = 0; l < num_leaves(); ++l) {
    const LeafNode& leaf = leaves[l];
    for (uint32_t n = 0; n < uint32_t(ChildMask<kLeafLog2>::kChildren); ++n) {
      if (!leaf.voxels.test(n)) continue;
      int32_t* row = xyz + 3 * (leaf.first_voxel + leaf.voxels.rank(n));
      row[0] = leaf.origin.i + int32_t(n >> (2 * kLeafLog2));
      row[1] = leaf.origin.j + int32_t((n >> kLeafLog2) & 7);
      row[2] = leaf.origin.k + int32_t(n & 7);
    }
  }
  return JaggedTensor(out, voxel_offsets_);
}

}  // namespace tilegrid::grid
