#pragma once
// CUDA side of the sparse convolution (internal). Device pointers; convolution.cpp validates
// shapes, dtypes and devices first.
#include <cstdint>

#include "grid/conv/conv_epilogue.h"
#include "grid/conv/conv_taps.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/index_tree.h"

namespace tilegrid::grid::cuda {

// The output coordinates of a convolution of the voxels xyz [n, 3] (grid of each row from
// voxel_offsets [num_grids + 1]): every (voxel, tap) that lands on an output, grid by grid,
// duplicates kept (from_ijk merges them). Returns false if one falls outside int32.
struct ConvCandidates {
  Tensor xyz;      // int32 [m, 3]
  Tensor offsets;  // int64 [num_grids + 1]
};
bool conv_candidates(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids, int64_t n,
                     const Taps& taps, int device, Stream stream, ConvCandidates& out);

// map [taps.volume, n_out] (see kernel_map in convolution.h): target voxels target_xyz [n_out,
// 3] with their grids from target_offsets, looked up in `source`. Entries of `map` outside
// [0, n_in) are skipped by invert_kernel_map and by the GEMMs (never read or written through).
void kernel_map(const TreeView& source, const int32_t* target_xyz, const int64_t* target_offsets,
                int64_t num_grids, int64_t n_out, const Taps& taps, int32_t* map, int device,
                Stream stream);
// The same map where the taps reach no further than the 8^3 blocks next to an output's own
// (stride 1, not transposed, kernel sizes up to 17; leaf_map_applies): one CTA a leaf of the
// target, over the 27 source leaves around it held in shared memory. Returns false, writing
// nothing, where it does not apply.
// order and ordered (both null, or both given): also kernel_map_row_order of the map into order
// and kernel_map_in_row_order into ordered [volume, n_out], from the rows' tap masks the leaf
// kernel builds with the map (no second pass over the map for the sort's keys).
bool leaf_map_applies(const Taps& taps);
void kernel_map_by_leaf(const TreeView& source, const LeafNode* target_leaves, int64_t num_leaves,
                        const int64_t* target_offsets, int64_t num_grids, int64_t n_out,
                        const Taps& taps, int32_t* map, int32_t* order, int32_t* ordered,
                        int device, Stream stream);
void invert_kernel_map(const int32_t* map, int64_t volume, int64_t n_out, int64_t n_in,
                       int32_t* inverse, int device, Stream stream);
// order [n_out]: the rows sorted stably by the bits t < 64 of (map[t][o] >= 0). ordered (or
// null): also kernel_map_in_row_order(map, order) into it, reading only the entries the sorted
// keys mark present (the others are -1 in a map that kernel_map built).
void kernel_map_row_order(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order,
                          int32_t* ordered, int device, Stream stream);
// out[t][i] = map[t][order[i]], [volume, n_out].
void kernel_map_in_row_order(const int32_t* map, const int32_t* order, int64_t volume,
                             int64_t n_out, int32_t* out, int device, Stream stream);

struct GatherGemm {
  const int32_t* map;  // [volume, rows]
  int64_t volume, rows;
  const void* features;  // [feature_rows, in_channels]
  int64_t feature_rows;
  const void* weight;  // [volume, in, out], or [volume, out, in] with transpose_weight
  int64_t in_channels, out_channels;
  bool transpose_weight;
  void* out;  // [rows, out_channels]
  DType dtype;
  const int32_t* row_order = nullptr;         // [rows], a permutation: the order tiles take rows in
  const int32_t* map_in_row_order = nullptr;  // [volume, rows]: map[t][row_order[i]] at [t][i]
  bool allow_tf32 = false;  // float32 may multiply as TF32 on tensor cores (sm_80 and newer)
  ConvEpilogueArgs epilogue{};  // applied to every output (device pointers)
};
void sparse_conv_forward(const GatherGemm& problem, int device, Stream stream);

struct WeightGrad {
  const int32_t* map;  // [volume, rows]
  int64_t volume, rows;
  const void* features;  // [feature_rows, in_channels]
  int64_t feature_rows;
  const void* grad_out;  // [rows, out_channels]
  int64_t in_channels, out_channels;
  void* grad_weight;  // [volume, in_channels, out_channels]
  DType dtype;
  const int32_t* row_order = nullptr;         // [rows]: the forward's (GatherGemm::row_order)
  const int32_t* map_in_row_order = nullptr;  // [volume, rows]: as GatherGemm's
  bool allow_tf32 = false;                    // as GatherGemm's
};
void sparse_conv_backward_weight(const WeightGrad& problem, int device, Stream stream);

// Tensor-core versions (sparse_conv_mma.cu) for float16 / bfloat16, and float32 as TF32 where
// the problem allows it, with channel counts that are multiples of 8 on sm_80 and newer; they
// return false, launching nothing, for any other case.
bool sparse_conv_forward_mma(const GatherGemm& problem, int device, Stream stream);
// partials: float32 [chunks][volume][in][out], chunks of chunk_rows output rows each.
bool sparse_conv_weight_partials_mma(const WeightGrad& problem, int64_t chunks, int64_t chunk_rows,
                                     float* partials, int device, Stream stream);

}  // namespace tilegrid::grid::cuda
