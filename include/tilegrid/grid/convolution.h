#pragma once
// Sparse 3D convolution over GridBatch topologies (fVDB's / spconv's operation).
//
// Geometry, per axis, for a kernel of size K and stride s: kernel tap t in [0, K) of output
// voxel o reads input voxel
//     i = o * s + t - pad,   pad = (K - 1) / 2 (rounded down),
// fVDB's relation fine = stride * coarse + tap - padding_before. K = 3, s = 1 is the centred
// 3x3x3 stencil; an even kernel reaches one voxel further after o * s than before it (K = 4:
// o * s - 1 .. o * s + 2), and K = 2, s = 2 reads the 2x2x2 block whose parent is o, the block
// coarsened_grid merges. Pooling windows (TapStart::AtOutput) start at o * s for every K, as
// fVDB's max_pool / avg_pool (K = 3: o * s .. o * s + 2, the block coarsened_grid(3) merges;
// K = 4: o * s .. o * s + 3). A transposed
// convolution runs the same taps backwards: input voxel i feeds output o = i * s + t - pad
// through tap t. Taps are numbered t = (t_i * K_j + t_j) * K_k + t_k, as the last three
// dimensions of a torch.nn.Conv3d weight laid over the (i, j, k) axes.
//
// A convolution is: the output grid (conv_grid / conv_transpose_grid, or any grid the caller
// chooses, e.g. the input grid itself for a submanifold convolution), its kernel map
// (kernel_map: for every tap and output voxel, the input row or -1), then the GEMMs over that
// map. The map is built once and reused by every layer on the same pair of grids, forward and
// backward (the plan idea of fVDB's ConvolutionPlan).
#include <array>
#include <cstdint>

#include "tilegrid/core/tensor.h"
#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

using Vec3i = std::array<int32_t, 3>;

// Where a kernel's taps start along an axis: (K - 1) / 2 before o * s (fVDB's convolutions;
// an odd kernel centred on o * s), or at o * s (fVDB's pooling windows).
enum class TapStart : uint8_t {
  Centred,   // pad (K - 1) / 2
  AtOutput,  // pad 0
};

struct ConvGeometry {
  Vec3i kernel_size{3, 3, 3};  // each >= 1
  Vec3i stride{1, 1, 1};       // each >= 1
  bool transposed = false;
  TapStart tap_start = TapStart::Centred;

  int64_t kernel_volume() const {
    return int64_t(kernel_size[0]) * kernel_size[1] * kernel_size[2];
  }
  // The padding of axis a (see the file comment).
  int32_t pad(int a) const { return tap_start == TapStart::AtOutput ? 0 : (kernel_size[a] - 1) / 2; }
};

// The voxels a convolution of `source` writes: every o that some active input reaches through
// some tap. Voxel size source * stride; origin moved to the centre of o's receptive field,
// half a source voxel for an even kernel (fVDB 0.6 keeps the source's origin for every K).
GridBatch conv_grid(const GridBatch& source, const Vec3i& kernel_size, const Vec3i& stride,
                    Stream stream = {});
// The voxels a transposed convolution of `source` writes (o = i * s + t - pad for every active
// i and tap t): voxel size source / stride.
GridBatch conv_transpose_grid(const GridBatch& source, const Vec3i& kernel_size,
                              const Vec3i& stride, Stream stream = {});
// conv_grid or conv_transpose_grid (by geometry.transposed) of any geometry: pooling's coarse
// grid is this grid under TapStart::AtOutput.
GridBatch conv_grid(const GridBatch& source, const ConvGeometry& geometry, Stream stream = {});

// int32 [kernel_volume, target.total_voxels()]: map[t][o] = the row of the input voxel that
// output row o reads through tap t, or -1 where that voxel is not active in `source`. Rows of
// grid b read only grid b. Both grids on one device; the map is built there.
Tensor kernel_map(const GridBatch& source, const GridBatch& target, const ConvGeometry& geometry,
                  Stream stream = {});

// The same pairs seen from the input side: inverse[t][i] = the output row that reads input row
// i through tap t, or -1 (for each tap an input feeds at most one output, so this is a map
// too). int32 [kernel_volume, source_rows].
Tensor invert_kernel_map(const TensorView& map, int64_t source_rows, Stream stream = {});

// An order of the output rows of `map` [kernel_volume, N_out] for sparse_conv_forward: int32
// [N_out], a permutation that sorts the rows (stably) by the set of taps they have (the first
// 64 taps; map[t][o] >= 0). The GEMMs compute an output tile's taps for all its rows; rows
// with the same taps in one tile skip the rest (on a surface scene a row has 9.5 of 27 taps,
// a tile of neighbouring rows nearly all 27). Built once a map, as the map is.
Tensor kernel_map_row_order(const TensorView& map, Stream stream = {});

// The map's columns in a row order: out[t][i] = map[t][row_order[i]], int32 [kernel_volume,
// N_out]. With it a GPU tile reads its rows' map entries as one contiguous run a tap instead
// of one scattered 4-byte read a row and tap (a 32-byte sector each: 8x the map's bytes).
// Built once a map and order, as they are.
Tensor kernel_map_in_row_order(const TensorView& map, const TensorView& row_order,
                               Stream stream = {});

// kernel_map, its kernel_map_row_order and the kernel_map_in_row_order of both, in one call
// (the same three tensors), as a GPU plan wants them: on the GPU the rows' tap masks (the
// sort's keys) are built with the map (by the leaf-by-leaf kernel where it applies, sparing a
// pass over the map), and the sorted masks say which entries of the ordered map are -1, so
// only the others are read from the map.
struct OrderedKernelMap {
  Tensor map, row_order, map_in_row_order;
};
OrderedKernelMap kernel_map_with_row_order(const GridBatch& source, const GridBatch& target,
                                           const ConvGeometry& geometry, Stream stream = {});

// out[o] = sum over taps t with map[t][o] >= 0 of features[map[t][o]] . weight[t].
// features [N_in, C_in], weight [kernel_volume, C_in, C_out], out [N_out, C_out] (overwritten),
// all of one float dtype (float64, float32, float16, bfloat16; sums in float32, float64 for
// float64), contiguous, on the map's device. map int32 [kernel_volume, N_out].
// With transpose_weight, weight is [kernel_volume, C_out, C_in] and weight[t]^T is applied:
// the input gradient is sparse_conv_forward(inverse map, grad_out, weight, transposed).
// row_order (optional; empty = rows in order): kernel_map_row_order(map), the order in which
// the GPU kernels take the rows. It changes speed, never the result (each row is computed
// alone); it must be a permutation of [0, N_out) (the CPU checks, a GPU kernel skips entries
// out of range). map_in_row_order (optional, only with row_order): kernel_map_in_row_order(map,
// row_order), read by the Hopper kernels in place of map (the CPU checks that it is).
// allow_tf32: float32 on a GPU of compute capability 8.0 or newer multiplies on tensor cores
// as TF32 (float32's range, 10 mantissa bits; sums in float32), as torch's convolutions do
// under torch.backends.cudnn.allow_tf32; otherwise float32 multiplies exactly on CUDA cores.
// The CPU ignores it.
// epilogue (optional): applied to every output before it is stored (see ConvEpilogue).
struct ConvEpilogue;
void sparse_conv_forward(const TensorView& map, const TensorView& features,
                         const TensorView& weight, const TensorView& out,
                         bool transpose_weight = false, Stream stream = {},
                         const TensorView& row_order = {}, const TensorView& map_in_row_order = {},
                         bool allow_tf32 = false, const ConvEpilogue* epilogue = nullptr);

// What sparse_conv_forward may do to each output value before storing it, for inference:
//   out[o][c] = relu?(sum[o][c] * scale[c] + shift[c] + residual[o][c])
// (a BatchNorm in eval mode folded into scale and shift, a residual block's skip input, a
// ReLU), in the sums' precision: the Hopper kernel applies it to its float32 sums, the others
// and the CPU after theirs. scale, shift: float32 [C_out], contiguous, or empty (1 and 0);
// residual: [N_out, C_out] in the features' dtype, contiguous, or empty. Not differentiable
// (the Python layer computes it unfused where a gradient is wanted).
struct ConvEpilogue {
  TensorView scale, shift, residual;
  bool relu = false;
};

// grad_weight[t] = sum over outputs o with map[t][o] >= 0 of features[map[t][o]]^T grad_out[o]:
// [kernel_volume, C_in, C_out] (overwritten) in the features' dtype. The sum runs in a fixed
// order (float32 partials over fixed chunks of outputs, then added chunk by chunk), so it is
// the same bits on every run. row_order, map_in_row_order: the forward's (optional, speed
// only, as there); allow_tf32 as there.
void sparse_conv_backward_weight(const TensorView& map, const TensorView& features,
                                 const TensorView& grad_out, const TensorView& grad_weight,
                                 Stream stream = {}, const TensorView& row_order = {},
                                 const TensorView& map_in_row_order = {}, bool allow_tf32 = false);

}  // namespace tilegrid::grid
