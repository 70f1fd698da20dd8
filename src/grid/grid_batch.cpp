// GridBatch queries on the CPU: they run TreeView's traversal, the same code a kernel runs.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tilegrid/grid/grid_batch.h"

#include "core/cuda_build.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/grid_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

template <class Node>
int64_t count(const Tensor& bytes) {
  return bytes.numel() / int64_t(sizeof(Node));
}

}  // namespace

int64_t GridBatch::num_voxels(int64_t grid) const {
  TG_CHECK_VALUE(grid >= 0 && grid < num_grids(), "GridBatch.num_voxels: grid ", grid,
                 " out of range for a batch of ", num_grids());
  return voxel_offsets_host_[size_t(grid + 1)] - voxel_offsets_host_[size_t(grid)];
}

GridBatch GridBatch::to(Device device, Stream stream) const {
  GridBatch out = *this;
  out.device_ = device;
  for (Tensor GridBatch::*member :
       {&GridBatch::uppers_, &GridBatch::lowers_, &GridBatch::leaves_, &GridBatch::upper_offsets_,
        &GridBatch::voxel_offsets_, &GridBatch::transforms_})
    out.*member = (this->*member).to(device, stream);
  return out;
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

Tensor GridBatch::ijk_to_index(const JaggedTensor& ijk, Stream stream) const {
  constexpr const char* kOp = "GridBatch.ijk_to_index";
  const TensorView& data = ijk.jdata();
  check_dtype(kOp, "ijk", data, {DType::Int32});
  check_ndim(kOp, "ijk", data, 2);
  TG_CHECK_VALUE(data.size(1) == 3, kOp, ": ijk must be [N, 3], got shape ", data.shape);
  check_contiguous(kOp, "ijk", data);
  TG_CHECK_VALUE(ijk.num_tensors() == num_grids(), kOp, ": ijk holds ", ijk.num_tensors(),
                 " tensors but the batch has ", num_grids(), " grids");
  TG_CHECK_VALUE(data.device == device_, kOp, ": ijk is on ", data.device, " but the grid is on ",
                 device_, "; move one of them (GridBatch.to)");

  Tensor out = Tensor::empty({data.size(0)}, DType::Int64, device_, stream);
  const int32_t* xyz = data.data_ptr<const int32_t>();
  const int64_t* offsets = ijk.joffsets().view().data_ptr<const int64_t>();
  int64_t* index = static_cast<int64_t*>(out.data());
  const TreeView tree = view();
  if (device_.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::ijk_to_index(tree, xyz, offsets, num_grids(), data.size(0), index, device_.index, stream);
#endif
    return out;
  }
  for (int64_t b = 0; b < num_grids(); ++b)
    for (int64_t n = offsets[b]; n < offsets[b + 1]; ++n)
      index[n] = tree.index_of(b, {xyz[3 * n], xyz[3 * n + 1], xyz[3 * n + 2]});
  return out;
}

JaggedTensor GridBatch::ijk(Stream stream) const {
  Tensor out = Tensor::empty({total_voxels(), 3}, DType::Int32, device_, stream);
  int32_t* xyz = static_cast<int32_t*>(out.data());
  const LeafNode* leaves = view().leaves;
  if (device_.is_cuda()) {
    require_cuda_build("GridBatch.ijk");
#ifdef TILEGRID_WITH_CUDA
    cuda::active_ijk(leaves, num_leaves(), xyz, device_.index, stream);
#endif
    return JaggedTensor::from_trusted_offsets(out, voxel_offsets_);
  }
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
  return JaggedTensor::from_trusted_offsets(out, voxel_offsets_);
}

}  // namespace tilegrid::grid
