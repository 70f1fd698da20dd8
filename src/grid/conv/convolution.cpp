// Sparse convolution: argument checks, the derived grids, and dispatch of the maps and GEMMs
// to the CPU reference (convolution_cpu.cpp) or the CUDA kernels (conv_kernel_map.cu,
// sparse_conv.cu).
#include "tilegrid/grid/convolution.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "core/cuda_build.h"
#include "grid/conv/conv_cpu.h"
#include "grid/conv/derived_geometry.h"
#include "grid/conv/map_args.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/conv/conv_cuda.h"
#endif

namespace tilegrid::grid {
namespace {

// The largest kernel size and stride a convolution takes (a 31^3 kernel has 29,791 taps), and
// the larger ones of the derived grids (derived_grids.cpp), whose kernels are only candidate
// generators: coarsened_grid(f) is a kernel f^3 at stride f, refined_grid(f) its transpose,
// dilated_grid(n) a kernel (2n + 1)^3. 2^20 keeps a kernel's volume within int64.
struct GeometryLimits {
  int32_t max_kernel_size, max_stride;
  bool bound_candidates;  // refuse more than 2^31 - 1 candidate voxels before allocating them
  const char* kernel_size_name;  // the arguments as the op's caller names them in errors
  const char* stride_name;
};
constexpr GeometryLimits kConvolutionLimits{31, 1024, false, "kernel_size", "stride"};
constexpr GeometryLimits kDerivedGridLimits{1 << 20, 1 << 20, true, "factor", "factor"};

Taps taps_of(const char* op, const ConvGeometry& g,
             const GeometryLimits& limits = kConvolutionLimits) {
  Taps taps{};
  for (int a = 0; a < 3; ++a) {
    TG_CHECK_VALUE(g.kernel_size[a] >= 1 && g.kernel_size[a] <= limits.max_kernel_size, op, ": ",
                   limits.kernel_size_name, " must be in [1, ", limits.max_kernel_size,
                   "] in every axis, got (", g.kernel_size[0], ", ", g.kernel_size[1], ", ",
                   g.kernel_size[2], ")");
    TG_CHECK_VALUE(g.stride[a] >= 1 && g.stride[a] <= limits.max_stride, op, ": ",
                   limits.stride_name, " must be in [1, ", limits.max_stride,
                   "] in every axis, got (", g.stride[0], ", ", g.stride[1], ", ", g.stride[2],
                   ")");
    taps.size[a] = g.kernel_size[a];
    taps.stride[a] = g.stride[a];
    taps.pad[a] = g.pad(a);
  }
  taps.transposed = g.transposed;
  taps.volume = g.kernel_volume();
  return taps;
}

GridBatch output_grid(const char* op, const GridBatch& source, const ConvGeometry& g,
                      Stream stream, const GeometryLimits& limits = kConvolutionLimits) {
  const Taps taps = taps_of(op, g, limits);
  if (limits.bound_candidates && !taps.tiles_its_stride()) {
    // Every voxel makes taps.volume candidates before duplicates merge; rows are int32.
    constexpr int64_t kMaxCandidates = std::numeric_limits<int32_t>::max();
    const int64_t n = source.total_voxels();
    TG_CHECK_VALUE(n == 0 || taps.volume <= kMaxCandidates / n, op, ": ", n, " voxels x ",
                   taps.volume, " offsets each would make more than 2**31 - 1 candidate voxels "
                   "(rows are int32)");
  }
  // The new voxel size, and the origin at the centre of an output's receptive field.
  std::vector<Vec3d> sizes = source.voxel_sizes(), origins = source.origins();
  for (size_t b = 0; b < sizes.size(); ++b)
    for (int a = 0; a < 3; ++a) {
      const double centre = (g.kernel_size[a] - 1) / 2.0 - g.pad(a);
      if (!g.transposed) {
        origins[b][size_t(a)] += centre * sizes[b][size_t(a)];
        sizes[b][size_t(a)] *= g.stride[a];
      } else {
        sizes[b][size_t(a)] /= g.stride[a];
        origins[b][size_t(a)] -= centre * sizes[b][size_t(a)];
      }
    }
  const JaggedTensor ijk = source.ijk(stream);
  const int32_t* xyz = ijk.jdata().view().data_ptr<const int32_t>();
  const int64_t* offsets = source.voxel_offsets().view().data_ptr<const int64_t>();
  constexpr const char* kRange = ": an output voxel's coordinate leaves the int32 range";
  if (source.device().is_cuda()) {
    require_cuda_build(op);
#ifdef TILEGRID_WITH_CUDA
    cuda::ConvCandidates out;
    TG_CHECK_VALUE(cuda::conv_candidates(xyz, offsets, source.num_grids(), source.total_voxels(),
                                         taps, source.device().index, stream, out),
                   op, kRange);
    return GridBatch::from_ijk(JaggedTensor::from_trusted_offsets(out.xyz, out.offsets), sizes,
                               origins, stream);
#endif
  }
  std::vector<int32_t> out_xyz;
  std::vector<int64_t> out_offsets;
  TG_CHECK_VALUE(cpu::conv_candidates(xyz, offsets, source.num_grids(), taps, out_xyz, out_offsets),
                 op, kRange);
  Tensor data = Tensor::empty({int64_t(out_xyz.size() / 3), 3}, DType::Int32, Device::cpu());
  std::copy(out_xyz.begin(), out_xyz.end(), static_cast<int32_t*>(data.data()));
  Tensor joffsets = Tensor::empty({int64_t(out_offsets.size())}, DType::Int64, Device::cpu());
  std::copy(out_offsets.begin(), out_offsets.end(), static_cast<int64_t*>(joffsets.data()));
  return GridBatch::from_ijk(JaggedTensor(data, joffsets), sizes, origins);
}

// On the CPU every entry is checked against the rows it indexes (a GPU kernel skips entries out
// of range instead: the maps that kernel_map builds never hold one).
void check_map_rows(const char* op, const TensorView& map, int64_t rows) {
  const int32_t* m = map.data_ptr<const int32_t>();
  for (int64_t e = 0; e < map.numel(); ++e)
    TG_CHECK_VALUE(m[e] < rows, op, ": the map names input row ", m[e], " but there are ", rows,
                   " rows");
}

// The CPU ignores a row order but checks that it is one (a permutation of its rows).
void check_permutation(const char* op, const TensorView& order) {
  const int32_t* o = order.data_ptr<const int32_t>();
  std::vector<bool> seen(size_t(order.numel()), false);
  for (int64_t i = 0; i < order.numel(); ++i) {
    TG_CHECK_VALUE(o[i] >= 0 && o[i] < order.numel() && !seen[size_t(o[i])], op,
                   ": row_order must be a permutation of [0, ", order.numel(), "), got ", o[i],
                   " at ", i);
    seen[size_t(o[i])] = true;
  }
}

// Whether a row order is given (an empty one means none), after checking its form.
bool check_row_order(const char* op, const TensorView& order, int64_t rows, Device device) {
  if (order.data == nullptr || order.numel() == 0) return false;
  check_dtype(op, "row_order", order, {DType::Int32});
  check_shape(op, "row_order", order, {rows});
  check_contiguous(op, "row_order", order);
  TG_CHECK_VALUE(order.device == device, op, ": row_order is on ", order.device,
                 " but the map is on ", device);
  return true;
}

// Whether a map in row order is given, after checking its form (it needs the order it follows).
bool check_map_in_row_order(const char* op, const TensorView& ordered, bool has_order,
                            const TensorView& map) {
  if (ordered.data == nullptr || ordered.numel() == 0) return false;
  TG_CHECK_VALUE(has_order, op, ": map_in_row_order is given without the row_order it follows");
  check_dtype(op, "map_in_row_order", ordered, {DType::Int32});
  check_shape(op, "map_in_row_order", ordered, {map.size(0), map.size(1)});
  check_contiguous(op, "map_in_row_order", ordered);
  TG_CHECK_VALUE(ordered.device == map.device, op, ": map_in_row_order is on ", ordered.device,
                 " but the map is on ", map.device);
  return true;
}

// The CPU ignores a map in row order but checks that it is the map's columns in that order.
void check_is_map_in_row_order(const char* op, const TensorView& ordered, const TensorView& map,
                               const TensorView& order) {
  const int64_t volume = map.size(0), rows = map.size(1);
  const int32_t* m = map.data_ptr<const int32_t>();
  const int32_t* mo = ordered.data_ptr<const int32_t>();
  const int32_t* o = order.data_ptr<const int32_t>();
  for (int64_t t = 0; t < volume; ++t)
    for (int64_t i = 0; i < rows; ++i)
      TG_CHECK_VALUE(mo[t * rows + i] == m[t * rows + o[i]], op,
                     ": map_in_row_order is not the map in row_order: at tap ", t, ", row ", i,
                     " it holds ", mo[t * rows + i], " where map[", t, "][row_order[", i, "]] is ",
                     m[t * rows + o[i]]);
}

void check_weight(const char* op, const char* name, const TensorView& w, int64_t volume, int64_t a,
                  int64_t b, DType dtype, Device device) {
  check_dtype(op, name, w, {dtype});
  check_shape(op, name, w, {volume, a, b});
  check_contiguous(op, name, w);
  TG_CHECK_VALUE(w.device == device, op, ": ", name, " is on ", w.device, " but the map is on ",
                 device);
}

// A ConvEpilogue's tensors checked against the output [rows, cout] of `dtype` on `device`,
// as the kernels' plain pointers (none given: an empty epilogue).
ConvEpilogueArgs epilogue_args(const char* op, const ConvEpilogue* epilogue, int64_t rows,
                               int64_t cout, DType dtype, Device device) {
  ConvEpilogueArgs args;
  if (epilogue == nullptr) return args;
  auto per_channel = [&](const char* name, const TensorView& v) -> const float* {
    if (v.data == nullptr) return nullptr;  // not given
    check_dtype(op, name, v, {DType::Float32});
    check_shape(op, name, v, {cout});
    check_contiguous(op, name, v);
    TG_CHECK_VALUE(v.device == device, op, ": ", name, " is on ", v.device,
                   " but the output is on ", device);
    return v.data_ptr<const float>();
  };
  args.scale = per_channel("epilogue scale", epilogue->scale);
  args.shift = per_channel("epilogue shift", epilogue->shift);
  if (epilogue->residual.data != nullptr) {
    check_matrix(op, "epilogue residual", epilogue->residual, rows, cout, dtype, device);
    args.residual = epilogue->residual.data;
  }
  args.relu = epilogue->relu;
  return args;
}

}  // namespace

GridBatch conv_grid(const GridBatch& source, const Vec3i& kernel_size, const Vec3i& stride,
                    Stream stream) {
  return output_grid("conv_grid", source, {kernel_size, stride, false}, stream);
}

GridBatch conv_transpose_grid(const GridBatch& source, const Vec3i& kernel_size,
                              const Vec3i& stride, Stream stream) {
  return output_grid("conv_transpose_grid", source, {kernel_size, stride, true}, stream);
}

GridBatch conv_grid(const GridBatch& source, const ConvGeometry& geometry, Stream stream) {
  return output_grid(geometry.transposed ? "conv_transpose_grid" : "conv_grid", source, geometry,
                     stream);
}

GridBatch derived_grid(const char* op, const GridBatch& source, const ConvGeometry& geometry,
                       Stream stream) {
  return output_grid(op, source, geometry, stream, kDerivedGridLimits);
}

namespace {

// kernel_map's map; where `ordered` is given and the GPU leaf kernel applies, also the map's row
// order and its columns in that order into it, built with the map (kernel_map_with_row_order).
Tensor map_of(const char* op, const GridBatch& source, const GridBatch& target,
              const ConvGeometry& geometry, Stream stream, OrderedKernelMap* ordered) {
  const Taps taps = taps_of(op, geometry);
  TG_CHECK_VALUE(source.num_grids() == target.num_grids(), op, ": the source batch has ",
                 source.num_grids(), " grids but the target has ", target.num_grids());
  TG_CHECK_VALUE(source.device() == target.device(), op, ": the source grid is on ",
                 source.device(), " but the target is on ", target.device());
  TG_CHECK_VALUE(source.total_voxels() < std::numeric_limits<int32_t>::max() &&
                     target.total_voxels() < std::numeric_limits<int32_t>::max(),
                 op, ": at most 2^31 - 1 voxels a batch (rows are int32), got ",
                 source.total_voxels(), " and ", target.total_voxels());
  const int64_t n_out = target.total_voxels();
  const Device device = target.device();
  Tensor map = Tensor::empty({taps.volume, n_out}, DType::Int32, device, stream);
#ifdef TILEGRID_WITH_CUDA
  if (device.is_cuda() && cuda::leaf_map_applies(taps)) {
    int32_t *order = nullptr, *in_order = nullptr;
    if (ordered != nullptr) {
      ordered->row_order = Tensor::empty({n_out}, DType::Int32, device, stream);
      ordered->map_in_row_order = Tensor::empty({taps.volume, n_out}, DType::Int32, device, stream);
      order = static_cast<int32_t*>(ordered->row_order.data());
      in_order = static_cast<int32_t*>(ordered->map_in_row_order.data());
    }
    cuda::kernel_map_by_leaf(source.view(), target.view().leaves, target.num_leaves(),
                             target.voxel_offsets().view().data_ptr<const int64_t>(),
                             target.num_grids(), n_out, taps, static_cast<int32_t*>(map.data()),
                             order, in_order, device.index, stream);
    return map;
  }
#endif
  const JaggedTensor ijk = target.ijk(stream);
  const int32_t* xyz = ijk.jdata().view().data_ptr<const int32_t>();
  const int64_t* offsets = target.voxel_offsets().view().data_ptr<const int64_t>();
  if (device.is_cuda()) {
    require_cuda_build(op);
#ifdef TILEGRID_WITH_CUDA
    cuda::kernel_map(source.view(), xyz, offsets, target.num_grids(), n_out, taps,
                     static_cast<int32_t*>(map.data()), device.index, stream);
#endif
    return map;
  }
  cpu::kernel_map(source.view(), xyz, offsets, target.num_grids(), n_out, taps,
                  static_cast<int32_t*>(map.data()));
  return map;
}

}  // namespace

Tensor kernel_map(const GridBatch& source, const GridBatch& target, const ConvGeometry& geometry,
                  Stream stream) {
  return map_of("kernel_map", source, target, geometry, stream, nullptr);
}

OrderedKernelMap kernel_map_with_row_order(const GridBatch& source, const GridBatch& target,
                                           const ConvGeometry& geometry, Stream stream) {
  constexpr const char* kOp = "kernel_map_with_row_order";
  OrderedKernelMap out;
  out.map = map_of(kOp, source, target, geometry, stream, &out);
  if (out.row_order.defined()) return out;  // the leaf kernel's
  const int64_t volume = out.map.view().size(0), n_out = out.map.view().size(1);
  const Device device = out.map.device();
  out.row_order = Tensor::empty({n_out}, DType::Int32, device, stream);
  out.map_in_row_order = Tensor::empty({volume, n_out}, DType::Int32, device, stream);
  const int32_t* m = static_cast<const int32_t*>(out.map.data());
  int32_t* order = static_cast<int32_t*>(out.row_order.data());
  int32_t* in_order = static_cast<int32_t*>(out.map_in_row_order.data());
  if (device.is_cuda()) {
#ifdef TILEGRID_WITH_CUDA
    cuda::kernel_map_row_order(m, volume, n_out, order, in_order, device.index, stream);
#endif
    return out;
  }
  cpu::kernel_map_row_order(m, volume, n_out, order);
  cpu::kernel_map_in_row_order(m, order, volume, n_out, in_order);
  return out;
}

Tensor invert_kernel_map(const TensorView& map, int64_t source_rows, Stream stream) {
  constexpr const char* kOp = "invert_kernel_map";
  check_map(kOp, "map", map);
  TG_CHECK_VALUE(source_rows >= 0 && source_rows < std::numeric_limits<int32_t>::max(), kOp,
                 ": source_rows must be in [0, 2^31 - 1), got ", source_rows);
  const int64_t volume = map.size(0), n_out = map.size(1);
  Tensor inverse = Tensor::empty({volume, source_rows}, DType::Int32, map.device, stream);
  const int32_t* m = map.data_ptr<const int32_t>();
  int32_t* inv = static_cast<int32_t*>(inverse.data());
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::invert_kernel_map(m, volume, n_out, source_rows, inv, map.device.index, stream);
#endif
    return inverse;
  }
  check_map_rows(kOp, map, source_rows);
  cpu::invert_kernel_map(m, volume, n_out, source_rows, inv);
  return inverse;
}

Tensor kernel_map_row_order(const TensorView& map, Stream stream) {
  constexpr const char* kOp = "kernel_map_row_order";
  check_map(kOp, "map", map);
  const int64_t volume = map.size(0), n_out = map.size(1);
  Tensor order = Tensor::empty({n_out}, DType::Int32, map.device, stream);
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::kernel_map_row_order(map.data_ptr<const int32_t>(), volume, n_out,
                               static_cast<int32_t*>(order.data()), nullptr, map.device.index,
                               stream);
#endif
    return order;
  }
  cpu::kernel_map_row_order(map.data_ptr<const int32_t>(), volume, n_out,
                            static_cast<int32_t*>(order.data()));
  return order;
}

Tensor kernel_map_in_row_order(const TensorView& map, const TensorView& row_order, Stream stream) {
  constexpr const char* kOp = "kernel_map_in_row_order";
  check_map(kOp, "map", map);
  const int64_t volume = map.size(0), n_out = map.size(1);
  TG_CHECK_VALUE(check_row_order(kOp, row_order, n_out, map.device) || n_out == 0, kOp,
                 ": row_order must be given (int32 [", n_out, "])");
  Tensor out = Tensor::empty({volume, n_out}, DType::Int32, map.device, stream);
  if (n_out == 0) return out;
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::kernel_map_in_row_order(map.data_ptr<const int32_t>(),
                                  row_order.data_ptr<const int32_t>(), volume, n_out,
                                  static_cast<int32_t*>(out.data()), map.device.index, stream);
#endif
    return out;
  }
  check_permutation(kOp, row_order);
  cpu::kernel_map_in_row_order(map.data_ptr<const int32_t>(), row_order.data_ptr<const int32_t>(),
                               volume, n_out, static_cast<int32_t*>(out.data()));
  return out;
}

void sparse_conv_forward(const TensorView& map, const TensorView& features,
                         const TensorView& weight, const TensorView& out, bool transpose_weight,
                         Stream stream, const TensorView& row_order,
                         const TensorView& map_in_row_order, bool allow_tf32,
                         const ConvEpilogue* epilogue) {
  constexpr const char* kOp = "sparse_conv_forward";
  check_map(kOp, "map", map);
  check_float(kOp, "features", features);
  check_ndim(kOp, "out", out, 2);
  const int64_t volume = map.size(0), rows = map.size(1);
  const int64_t cin = features.size(1), cout = out.size(1);
  const DType dtype = features.dtype;
  check_matrix(kOp, "features", features, features.size(0), cin, dtype, map.device);
  check_matrix(kOp, "out", out, rows, cout, dtype, map.device);
  if (transpose_weight)
    check_weight(kOp, "weight", weight, volume, cout, cin, dtype, map.device);
  else
    check_weight(kOp, "weight", weight, volume, cin, cout, dtype, map.device);
  const bool ordered = check_row_order(kOp, row_order, rows, map.device);
  const bool ordered_map = check_map_in_row_order(kOp, map_in_row_order, ordered, map);
  const ConvEpilogueArgs fused = epilogue_args(kOp, epilogue, rows, cout, dtype, map.device);
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::GatherGemm problem{map.data_ptr<const int32_t>(),
                             volume,
                             rows,
                             features.data,
                             features.size(0),
                             weight.data,
                             cin,
                             cout,
                             transpose_weight,
                             out.data,
                             dtype};
    problem.row_order = ordered ? row_order.data_ptr<const int32_t>() : nullptr;
    problem.map_in_row_order = ordered_map ? map_in_row_order.data_ptr<const int32_t>() : nullptr;
    problem.allow_tf32 = allow_tf32;
    problem.epilogue = fused;
    cuda::sparse_conv_forward(problem, map.device.index, stream);
#endif
    return;
  }
  check_map_rows(kOp, map, features.size(0));
  if (ordered) check_permutation(kOp, row_order);
  if (ordered_map) check_is_map_in_row_order(kOp, map_in_row_order, map, row_order);
  cpu::sparse_conv_forward(map.data_ptr<const int32_t>(), volume, rows, features.data,
                           features.size(0), weight.data, cin, cout, transpose_weight, out.data,
                           dtype, fused);
}

void sparse_conv_backward_weight(const TensorView& map, const TensorView& features,
                                 const TensorView& grad_out, const TensorView& grad_weight,
                                 Stream stream, const TensorView& row_order,
                                 const TensorView& map_in_row_order, bool allow_tf32) {
  constexpr const char* kOp = "sparse_conv_backward_weight";
  check_map(kOp, "map", map);
  check_float(kOp, "features", features);
  check_float(kOp, "grad_out", grad_out);
  const int64_t volume = map.size(0), rows = map.size(1);
  const int64_t cin = features.size(1), cout = grad_out.size(1);
  const DType dtype = features.dtype;
  check_matrix(kOp, "features", features, features.size(0), cin, dtype, map.device);
  check_matrix(kOp, "grad_out", grad_out, rows, cout, dtype, map.device);
  check_weight(kOp, "grad_weight", grad_weight, volume, cin, cout, dtype, map.device);
  const bool ordered = check_row_order(kOp, row_order, rows, map.device);
  const bool ordered_map = check_map_in_row_order(kOp, map_in_row_order, ordered, map);
  if (map.device.is_cuda()) {
    require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
    cuda::WeightGrad problem{map.data_ptr<const int32_t>(),
                             volume,
                             rows,
                             features.data,
                             features.size(0),
                             grad_out.data,
                             cin,
                             cout,
                             grad_weight.data,
                             dtype};
    problem.row_order = ordered ? row_order.data_ptr<const int32_t>() : nullptr;
    problem.map_in_row_order = ordered_map ? map_in_row_order.data_ptr<const int32_t>() : nullptr;
    problem.allow_tf32 = allow_tf32;
    cuda::sparse_conv_backward_weight(problem, map.device.index, stream);
#endif
    return;
  }
  check_map_rows(kOp, map, features.size(0));
  if (ordered) check_permutation(kOp, row_order);
  if (ordered_map) check_is_map_in_row_order(kOp, map_in_row_order, map, row_order);
  cpu::sparse_conv_backward_weight(map.data_ptr<const int32_t>(), volume, rows, features.data,
                                   features.size(0), grad_out.data, cin, cout, grad_weight.data,
                                   dtype);
}

}  // namespace tilegrid::grid
