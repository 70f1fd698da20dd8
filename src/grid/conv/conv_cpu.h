#pragma once
// CPU side of the sparse convolution (internal): the reference loops, float64 sums. Host
// pointers; convolution.cpp validates first.
#include <cstdint>
#include <vector>

#include "grid/conv/conv_epilogue.h"
#include "grid/conv/conv_taps.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/index_tree.h"

namespace tilegrid::grid::cpu {

// Output coordinates (duplicates kept) and their per-grid offsets; false if one leaves int32.
bool conv_candidates(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids,
                     const Taps& taps, std::vector<int32_t>& out_xyz,
                     std::vector<int64_t>& out_offsets);

void kernel_map(const TreeView& source, const int32_t* target_xyz, const int64_t* target_offsets,
                int64_t num_grids, int64_t n_out, const Taps& taps, int32_t* map);
void invert_kernel_map(const int32_t* map, int64_t volume, int64_t n_out, int64_t n_in,
                       int32_t* inverse);
void kernel_map_row_order(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order);
void kernel_map_in_row_order(const int32_t* map, const int32_t* order, int64_t volume,
                             int64_t n_out, int32_t* out);

void sparse_conv_forward(const int32_t* map, int64_t volume, int64_t rows, const void* features,
                         int64_t features_rows, const void* weight, int64_t in_channels,
                         int64_t out_channels, bool transpose_weight, void* out, DType dtype,
                         const ConvEpilogueArgs& epilogue = {});
void sparse_conv_backward_weight(const int32_t* map, int64_t volume, int64_t rows,
                                 const void* features, int64_t features_rows, const void* grad_out,
                                 int64_t in_channels, int64_t out_channels, void* grad_weight,
                                 DType dtype);

}  // namespace tilegrid::grid::cpu
