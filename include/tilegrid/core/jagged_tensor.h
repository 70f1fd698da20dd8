#pragma once
// A batch of B tensors whose leading sizes differ, stored as one tensor `jdata` of shape
// [N, ...] plus `joffsets` (int64, [B+1]): tensor b is rows joffsets[b] .. joffsets[b+1].
// Names follow fVDB (jdata, joffsets, jidx) so that its users read our code without a map.
#include <cstdint>
#include <utility>

#include "tilegrid/core/tensor.h"

namespace tilegrid {

// Throws ValueError unless `offsets` is an int64 [B+1] vector on data's device with
// offsets[0] == 0, non-decreasing entries and offsets[B] == data.size(0). For CUDA offsets
// this copies the B+1 offsets to the host and synchronises `stream`.
void validate_jagged(const TensorView& data, const TensorView& offsets, Stream stream = {});

// Writes jidx[i] = b for every row i of tensor b (int32, [N]); offsets must be valid.
void jagged_batch_index(const TensorView& offsets, const TensorView& jidx, Stream stream = {});

class JaggedTensor {
 public:
  // Validates on construction (see validate_jagged).
  JaggedTensor(Tensor jdata, Tensor joffsets, Stream stream = {});

  // For offsets the library has just made itself (a grid's voxel offsets, a kernel's output
  // ranges): not validated. On a GPU a validation costs a stream synchronisation, and a
  // sparse network's level plans built ~13 of them for offsets that were right by
  // construction.
  static JaggedTensor from_trusted_offsets(Tensor jdata, Tensor joffsets);

  const Tensor& jdata() const { return jdata_; }
  const Tensor& joffsets() const { return joffsets_; }
  int64_t num_tensors() const { return joffsets_.shape()[0] - 1; }
  int64_t num_rows() const { return jdata_.shape()[0]; }
  Device device() const { return jdata_.device(); }

  // Per-row batch index, computed on demand (allocates through the default allocator).
  Tensor jidx(Stream stream = {}) const;

 private:
  struct Trusted {};
  JaggedTensor(Tensor jdata, Tensor joffsets, Trusted)
      : jdata_(std::move(jdata)), joffsets_(std::move(joffsets)) {}

  Tensor jdata_;
  Tensor joffsets_;
};

}  // namespace tilegrid
