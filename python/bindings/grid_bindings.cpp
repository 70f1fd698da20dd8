// Grid-pillar bindings: GridBatch. Jagged inputs arrive as (jdata, joffsets) DLPack capsules,
// outputs leave as capsules; the Python class tilegrid.GridBatch wraps this one.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "tilegrid/grid/convolution.h"
#include "tilegrid/grid/derived.h"
#include "tilegrid/grid/grid_batch.h"
#include "tilegrid/grid/index_tree.h"
#include "tilegrid/grid/marching_cubes.h"
#include "tilegrid/grid/nvdb_io.h"
#include "tilegrid/grid/pooling.h"
#include "tilegrid/grid/rays.h"
#include "tilegrid/grid/sampling.h"
#include "tilegrid/grid/tsdf.h"
#include "tilegrid/grid/volume_render.h"

namespace tilegrid::python {

using grid::GridBatch;
using grid::Vec3d;

namespace {

JaggedTensor jagged_from_capsules(nb::capsule jdata, nb::capsule joffsets) {
  return JaggedTensor(tensor_from_capsule(jdata), tensor_from_capsule(joffsets));
}

nb::object jagged_to_capsules(const JaggedTensor& j) {
  return nb::make_tuple(to_capsule(j.jdata()), to_capsule(j.joffsets()));
}

}  // namespace

void bind_grid(nb::module_& m) {
  // Bytes of an upper node, a lower node and a leaf of the index tree (GridBatch.num_bytes).
  m.attr("grid_node_bytes") =
      nb::make_tuple(sizeof(grid::UpperNode), sizeof(grid::LowerNode), sizeof(grid::LeafNode));
  nb::class_<GridBatch>(m, "GridBatch")
      .def_static(
          "from_ijk",
          [](nb::capsule jdata, nb::capsule joffsets, std::vector<Vec3d> voxel_sizes,
             std::vector<Vec3d> origins, uintptr_t stream) {
            return GridBatch::from_ijk(jagged_from_capsules(jdata, joffsets), voxel_sizes, origins,
                                       as_stream(stream));
          },
          nb::arg("jdata"), nb::arg("joffsets"), nb::arg("voxel_sizes"), nb::arg("origins"),
          nb::arg("stream") = 0)
      .def_static(
          "from_points",
          [](nb::capsule jdata, nb::capsule joffsets, std::vector<Vec3d> voxel_sizes,
             std::vector<Vec3d> origins, uintptr_t stream) {
            return GridBatch::from_points(jagged_from_capsules(jdata, joffsets), voxel_sizes,
                                          origins, as_stream(stream));
          },
          nb::arg("jdata"), nb::arg("joffsets"), nb::arg("voxel_sizes"), nb::arg("origins"),
          nb::arg("stream") = 0)
      .def_static(
          "from_nearest_voxels_to_points",
          [](nb::capsule jdata, nb::capsule joffsets, std::vector<Vec3d> voxel_sizes,
             std::vector<Vec3d> origins, uintptr_t stream) {
            return GridBatch::from_nearest_voxels_to_points(
                jagged_from_capsules(jdata, joffsets), voxel_sizes, origins, as_stream(stream));
          },
          nb::arg("jdata"), nb::arg("joffsets"), nb::arg("voxel_sizes"), nb::arg("origins"),
          nb::arg("stream") = 0)
      .def_static(
          "from_mesh",
          [](nb::capsule vdata, nb::capsule voffsets, nb::capsule fdata, nb::capsule foffsets,
             std::vector<Vec3d> voxel_sizes, std::vector<Vec3d> origins, uintptr_t stream) {
            return GridBatch::from_mesh(jagged_from_capsules(vdata, voffsets),
                                        jagged_from_capsules(fdata, foffsets), voxel_sizes, origins,
                                        as_stream(stream));
          },
          nb::arg("vertices"), nb::arg("vertex_offsets"), nb::arg("faces"), nb::arg("face_offsets"),
          nb::arg("voxel_sizes"), nb::arg("origins"), nb::arg("stream") = 0)
      .def_static("from_dense", &GridBatch::from_dense, nb::arg("num_grids"), nb::arg("size"),
                  nb::arg("ijk_min"), nb::arg("voxel_sizes"), nb::arg("origins"))
      .def(
          "to",
          [](const GridBatch& g, const std::string& device_type, int index, uintptr_t stream) {
            return g.to(device_type == "cuda" ? Device::cuda(index) : Device::cpu(),
                        as_stream(stream));
          },
          nb::arg("device_type"), nb::arg("device_index") = 0, nb::arg("stream") = 0)
      .def_prop_ro("device", [](const GridBatch& g) { return g.device().str(); })
      .def_prop_ro("num_grids", &GridBatch::num_grids)
      .def_prop_ro("total_voxels", &GridBatch::total_voxels)
      .def("num_voxels", &GridBatch::num_voxels, nb::arg("grid"))
      .def_prop_ro("num_upper_nodes", &GridBatch::num_upper_nodes)
      .def_prop_ro("num_lower_nodes", &GridBatch::num_lower_nodes)
      .def_prop_ro("num_leaves", &GridBatch::num_leaves)
      .def_prop_ro("tree_bytes", &GridBatch::tree_bytes)
      .def_prop_ro("voxel_sizes", &GridBatch::voxel_sizes)
      .def_prop_ro("origins", &GridBatch::origins)
      .def("voxel_offsets", [](const GridBatch& g) { return to_capsule(g.voxel_offsets()); })
      .def(
          "ijk",
          [](const GridBatch& g, uintptr_t stream) {
            return jagged_to_capsules(g.ijk(as_stream(stream)));
          },
          nb::arg("stream") = 0)
      .def(
          "ijk_to_index",
          [](const GridBatch& g, nb::capsule jdata, nb::capsule joffsets, uintptr_t stream) {
            return to_capsule(
                g.ijk_to_index(jagged_from_capsules(jdata, joffsets), as_stream(stream)));
          },
          nb::arg("jdata"), nb::arg("joffsets"), nb::arg("stream") = 0);

  m.def(
      "grid_voxels_along_rays",
      [](const GridBatch& g, nb::capsule origins, nb::capsule origin_offsets,
         nb::capsule directions, nb::capsule direction_offsets, int64_t max_voxels, double eps,
         uintptr_t stream) {
        const grid::RayVoxels r =
            grid::voxels_along_rays(g, jagged_from_capsules(origins, origin_offsets),
                                    jagged_from_capsules(directions, direction_offsets), max_voxels,
                                    eps, as_stream(stream));
        return nb::make_tuple(to_capsule(r.offsets), to_capsule(r.rows), to_capsule(r.ijk),
                              to_capsule(r.times));
      },
      nb::arg("grid"), nb::arg("origins"), nb::arg("origin_offsets"), nb::arg("directions"),
      nb::arg("direction_offsets"), nb::arg("max_voxels"), nb::arg("eps"), nb::arg("stream") = 0);
  m.def(
      "grid_segments_along_rays",
      [](const GridBatch& g, nb::capsule origins, nb::capsule origin_offsets,
         nb::capsule directions, nb::capsule direction_offsets, int64_t max_segments, double eps,
         uintptr_t stream) {
        const grid::RaySegments r =
            grid::segments_along_rays(g, jagged_from_capsules(origins, origin_offsets),
                                      jagged_from_capsules(directions, direction_offsets),
                                      max_segments, eps, as_stream(stream));
        return nb::make_tuple(to_capsule(r.offsets), to_capsule(r.times));
      },
      nb::arg("grid"), nb::arg("origins"), nb::arg("origin_offsets"), nb::arg("directions"),
      nb::arg("direction_offsets"), nb::arg("max_segments"), nb::arg("eps"), nb::arg("stream") = 0);
  m.def(
      "grid_uniform_ray_samples",
      [](const GridBatch& g, nb::capsule origins, nb::capsule origin_offsets,
         nb::capsule directions, nb::capsule direction_offsets, nb::capsule t_min,
         nb::capsule t_min_offsets, nb::capsule t_max, nb::capsule t_max_offsets, double step_size,
         double cone_angle, bool include_end_segments, bool return_midpoints, double eps,
         uintptr_t stream) {
        const grid::RaySamples r = grid::uniform_ray_samples(
            g, jagged_from_capsules(origins, origin_offsets),
            jagged_from_capsules(directions, direction_offsets),
            jagged_from_capsules(t_min, t_min_offsets), jagged_from_capsules(t_max, t_max_offsets),
            step_size, cone_angle, include_end_segments, return_midpoints, eps, as_stream(stream));
        return nb::make_tuple(to_capsule(r.offsets), to_capsule(r.times));
      },
      nb::arg("grid"), nb::arg("origins"), nb::arg("origin_offsets"), nb::arg("directions"),
      nb::arg("direction_offsets"), nb::arg("t_min"), nb::arg("t_min_offsets"), nb::arg("t_max"),
      nb::arg("t_max_offsets"), nb::arg("step_size"), nb::arg("cone_angle"),
      nb::arg("include_end_segments"), nb::arg("return_midpoints"), nb::arg("eps"),
      nb::arg("stream") = 0);
  m.def(
      "grid_ray_implicit_intersection",
      [](const GridBatch& g, nb::capsule origins, nb::capsule origin_offsets,
         nb::capsule directions, nb::capsule direction_offsets, nb::ndarray<> scalars, double eps,
         uintptr_t stream) {
        return to_capsule(
            grid::ray_implicit_intersection(g, jagged_from_capsules(origins, origin_offsets),
                                            jagged_from_capsules(directions, direction_offsets),
                                            as_view(scalars), eps, as_stream(stream)));
      },
      nb::arg("grid"), nb::arg("origins"), nb::arg("origin_offsets"), nb::arg("directions"),
      nb::arg("direction_offsets"), nb::arg("scalars"), nb::arg("eps"), nb::arg("stream") = 0);
  m.def(
      "grid_marching_cubes",
      [](const GridBatch& g, nb::ndarray<> field, double level, uintptr_t stream) {
        const grid::CubeMesh mesh =
            grid::marching_cubes(g, as_view(field), level, as_stream(stream));
        return nb::make_tuple(to_capsule(mesh.vertices), to_capsule(mesh.normals),
                              to_capsule(mesh.faces), to_capsule(mesh.vertex_offsets),
                              to_capsule(mesh.face_offsets));
      },
      nb::arg("grid"), nb::arg("field"), nb::arg("level"), nb::arg("stream") = 0);
  m.def(
      "grid_integrate_tsdf",
      [](const GridBatch& g, double truncation, nb::ndarray<> intrinsics,
         nb::ndarray<> world_to_camera, nb::ndarray<> depths,
         std::optional<nb::ndarray<>> pixel_weights, nb::ndarray<> tsdf, nb::ndarray<> weights,
         uintptr_t stream) {
        std::optional<TensorView> pw;
        if (pixel_weights) pw = as_view(*pixel_weights);
        grid::integrate_tsdf(g, truncation,
                             {as_view(intrinsics), as_view(world_to_camera), as_view(depths), pw},
                             as_view(tsdf), as_view(weights), as_stream(stream));
      },
      nb::arg("grid"), nb::arg("truncation"), nb::arg("intrinsics"), nb::arg("world_to_camera"),
      nb::arg("depths"), nb::arg("pixel_weights").none(), nb::arg("tsdf"), nb::arg("weights"),
      nb::arg("stream") = 0);
  m.def(
      "volume_render",
      [](nb::ndarray<> sigmas, nb::ndarray<> rgbs, nb::ndarray<> deltas, nb::ndarray<> ts,
         nb::ndarray<> offsets, double threshold, nb::ndarray<> rgb, nb::ndarray<> depth,
         nb::ndarray<> opacity, nb::ndarray<> weights, nb::ndarray<> count, uintptr_t stream) {
        grid::volume_render({as_view(sigmas), as_view(rgbs), as_view(deltas), as_view(ts),
                             as_view(offsets), threshold},
                            as_view(rgb), as_view(depth), as_view(opacity), as_view(weights),
                            as_view(count), as_stream(stream));
      },
      nb::arg("sigmas"), nb::arg("rgbs"), nb::arg("deltas"), nb::arg("ts"), nb::arg("offsets"),
      nb::arg("threshold"), nb::arg("rgb"), nb::arg("depth"), nb::arg("opacity"),
      nb::arg("weights"), nb::arg("count"), nb::arg("stream") = 0);
  m.def(
      "volume_render_backward",
      [](nb::ndarray<> sigmas, nb::ndarray<> rgbs, nb::ndarray<> deltas, nb::ndarray<> ts,
         nb::ndarray<> offsets, double threshold, nb::ndarray<> grad_rgb, nb::ndarray<> grad_depth,
         nb::ndarray<> grad_opacity, std::optional<nb::ndarray<>> grad_weights,
         nb::ndarray<> grad_sigmas, nb::ndarray<> grad_rgbs, nb::ndarray<> grad_deltas,
         nb::ndarray<> grad_ts, uintptr_t stream) {
        std::optional<TensorView> gw;
        if (grad_weights) gw = as_view(*grad_weights);
        grid::volume_render_backward({as_view(sigmas), as_view(rgbs), as_view(deltas), as_view(ts),
                                      as_view(offsets), threshold},
                                     as_view(grad_rgb), as_view(grad_depth), as_view(grad_opacity),
                                     gw, as_view(grad_sigmas), as_view(grad_rgbs),
                                     as_view(grad_deltas), as_view(grad_ts), as_stream(stream));
      },
      nb::arg("sigmas"), nb::arg("rgbs"), nb::arg("deltas"), nb::arg("ts"), nb::arg("offsets"),
      nb::arg("threshold"), nb::arg("grad_rgb"), nb::arg("grad_depth"), nb::arg("grad_opacity"),
      nb::arg("grad_weights").none(), nb::arg("grad_sigmas"), nb::arg("grad_rgbs"),
      nb::arg("grad_deltas"), nb::arg("grad_ts"), nb::arg("stream") = 0);
  m.def(
      "grid_sample_trilinear",
      [](const GridBatch& g, nb::capsule jdata, nb::capsule joffsets, nb::ndarray<> features,
         nb::ndarray<> out, uintptr_t stream) {
        grid::sample_trilinear(g, jagged_from_capsules(jdata, joffsets), as_view(features),
                               as_view(out), as_stream(stream));
      },
      nb::arg("grid"), nb::arg("jdata"), nb::arg("joffsets"), nb::arg("features"), nb::arg("out"),
      nb::arg("stream") = 0);
  m.def(
      "grid_sample_trilinear_backward_points",
      [](const GridBatch& g, nb::capsule jdata, nb::capsule joffsets, nb::ndarray<> features,
         nb::ndarray<> grad_out, nb::ndarray<> grad_points, uintptr_t stream) {
        grid::sample_trilinear_backward_points(g, jagged_from_capsules(jdata, joffsets),
                                               as_view(features), as_view(grad_out),
                                               as_view(grad_points), as_stream(stream));
      },
      nb::arg("grid"), nb::arg("jdata"), nb::arg("joffsets"), nb::arg("features"),
      nb::arg("grad_out"), nb::arg("grad_points"), nb::arg("stream") = 0);
  m.def(
      "grid_splat_trilinear",
      [](const GridBatch& g, nb::capsule jdata, nb::capsule joffsets, nb::ndarray<> values,
         nb::ndarray<> out, uintptr_t stream) {
        grid::splat_trilinear(g, jagged_from_capsules(jdata, joffsets), as_view(values),
                              as_view(out), as_stream(stream));
      },
      nb::arg("grid"), nb::arg("jdata"), nb::arg("joffsets"), nb::arg("values"), nb::arg("out"),
      nb::arg("stream") = 0);

  // Sparse convolution: the output grids, the kernel maps, and the GEMMs over a map.
  // pooling: the taps start at o * stride (TapStart::AtOutput), as fVDB's pooling windows.
  const auto geometry = [](grid::Vec3i kernel_size, grid::Vec3i stride, bool transposed,
                           bool pooling) {
    return grid::ConvGeometry{kernel_size, stride, transposed,
                              pooling ? grid::TapStart::AtOutput : grid::TapStart::Centred};
  };
  m.def(
      "conv_grid",
      [geometry](const GridBatch& g, grid::Vec3i kernel_size, grid::Vec3i stride, bool transposed,
                 uintptr_t stream, bool pooling) {
        return grid::conv_grid(g, geometry(kernel_size, stride, transposed, pooling),
                               as_stream(stream));
      },
      nb::arg("grid"), nb::arg("kernel_size"), nb::arg("stride"), nb::arg("transposed"),
      nb::arg("stream") = 0, nb::arg("pooling") = false);
  m.def(
      "coarsened_grid",
      [](const GridBatch& g, grid::Vec3i factor, uintptr_t stream) {
        return grid::coarsened_grid(g, factor, as_stream(stream));
      },
      nb::arg("grid"), nb::arg("factor"), nb::arg("stream") = 0);
  m.def(
      "refined_grid",
      [](const GridBatch& g, grid::Vec3i factor, uintptr_t stream) {
        return grid::refined_grid(g, factor, as_stream(stream));
      },
      nb::arg("grid"), nb::arg("factor"), nb::arg("stream") = 0);
  m.def(
      "dual_grid",
      [](const GridBatch& g, bool exclude_border, uintptr_t stream) {
        return grid::dual_grid(g, exclude_border, as_stream(stream));
      },
      nb::arg("grid"), nb::arg("exclude_border"), nb::arg("stream") = 0);
  m.def(
      "dilated_grid",
      [](const GridBatch& g, int64_t dilation, uintptr_t stream) {
        return grid::dilated_grid(g, dilation, as_stream(stream));
      },
      nb::arg("grid"), nb::arg("dilation"), nb::arg("stream") = 0);
  m.def(
      "pruned_grid",
      [](const GridBatch& g, nb::capsule mask, uintptr_t stream) {
        return grid::pruned_grid(g, tensor_from_capsule(mask).view(), as_stream(stream));
      },
      nb::arg("grid"), nb::arg("mask"), nb::arg("stream") = 0);
  m.def(
      "kernel_map",
      [geometry](const GridBatch& source, const GridBatch& target, grid::Vec3i kernel_size,
                 grid::Vec3i stride, bool transposed, uintptr_t stream, bool pooling) {
        return to_capsule(grid::kernel_map(
            source, target, geometry(kernel_size, stride, transposed, pooling), as_stream(stream)));
      },
      nb::arg("source"), nb::arg("target"), nb::arg("kernel_size"), nb::arg("stride"),
      nb::arg("transposed"), nb::arg("stream") = 0, nb::arg("pooling") = false);
  m.def(
      "kernel_map_with_row_order",
      [geometry](const GridBatch& source, const GridBatch& target, grid::Vec3i kernel_size,
                 grid::Vec3i stride, bool transposed, uintptr_t stream, bool pooling) {
        const grid::OrderedKernelMap m = grid::kernel_map_with_row_order(
            source, target, geometry(kernel_size, stride, transposed, pooling), as_stream(stream));
        return nb::make_tuple(to_capsule(m.map), to_capsule(m.row_order),
                              to_capsule(m.map_in_row_order));
      },
      nb::arg("source"), nb::arg("target"), nb::arg("kernel_size"), nb::arg("stride"),
      nb::arg("transposed"), nb::arg("stream") = 0, nb::arg("pooling") = false);
  m.def(
      "invert_kernel_map",
      [](nb::ndarray<> map, int64_t source_rows, uintptr_t stream) {
        return to_capsule(grid::invert_kernel_map(as_view(map), source_rows, as_stream(stream)));
      },
      nb::arg("map"), nb::arg("source_rows"), nb::arg("stream") = 0);
  m.def(
      "kernel_map_row_order",
      [](nb::ndarray<> map, uintptr_t stream) {
        return to_capsule(grid::kernel_map_row_order(as_view(map), as_stream(stream)));
      },
      nb::arg("map"), nb::arg("stream") = 0);
  m.def(
      "kernel_map_in_row_order",
      [](nb::ndarray<> map, nb::ndarray<> row_order, uintptr_t stream) {
        return to_capsule(
            grid::kernel_map_in_row_order(as_view(map), as_view(row_order), as_stream(stream)));
      },
      nb::arg("map"), nb::arg("row_order"), nb::arg("stream") = 0);
  auto optional_view = [](const std::optional<nb::ndarray<>>& a) {
    return a ? as_view(*a) : TensorView{};
  };
  m.def(
      "sparse_conv_forward",
      [optional_view](nb::ndarray<> map, nb::ndarray<> features, nb::ndarray<> weight,
                      nb::ndarray<> out, bool transpose_weight, uintptr_t stream,
                      std::optional<nb::ndarray<>> row_order,
                      std::optional<nb::ndarray<>> map_in_row_order, bool allow_tf32,
                      std::optional<nb::ndarray<>> scale, std::optional<nb::ndarray<>> shift,
                      std::optional<nb::ndarray<>> residual, bool relu) {
        const grid::ConvEpilogue epilogue{optional_view(scale), optional_view(shift),
                                          optional_view(residual), relu};
        const bool fused = scale || shift || residual || relu;
        grid::sparse_conv_forward(as_view(map), as_view(features), as_view(weight), as_view(out),
                                  transpose_weight, as_stream(stream), optional_view(row_order),
                                  optional_view(map_in_row_order), allow_tf32,
                                  fused ? &epilogue : nullptr);
      },
      nb::arg("map"), nb::arg("features"), nb::arg("weight"), nb::arg("out"),
      nb::arg("transpose_weight"), nb::arg("stream") = 0, nb::arg("row_order") = nb::none(),
      nb::arg("map_in_row_order") = nb::none(), nb::arg("allow_tf32") = false,
      nb::arg("scale") = nb::none(), nb::arg("shift") = nb::none(),
      nb::arg("residual") = nb::none(), nb::arg("relu") = false);
  m.def(
      "sparse_conv_backward_weight",
      [optional_view](nb::ndarray<> map, nb::ndarray<> features, nb::ndarray<> grad_out,
                      nb::ndarray<> grad_weight, uintptr_t stream,
                      std::optional<nb::ndarray<>> row_order,
                      std::optional<nb::ndarray<>> map_in_row_order, bool allow_tf32) {
        grid::sparse_conv_backward_weight(
            as_view(map), as_view(features), as_view(grad_out), as_view(grad_weight),
            as_stream(stream), optional_view(row_order), optional_view(map_in_row_order),
            allow_tf32);
      },
      nb::arg("map"), nb::arg("features"), nb::arg("grad_out"), nb::arg("grad_weight"),
      nb::arg("stream") = 0, nb::arg("row_order") = nb::none(),
      nb::arg("map_in_row_order") = nb::none(), nb::arg("allow_tf32") = false);

  m.def(
      "max_pool_forward",
      [](nb::ndarray<> map, nb::ndarray<> features, nb::ndarray<> out, nb::ndarray<> argmax,
         uintptr_t stream) {
        grid::max_pool_forward(as_view(map), as_view(features), as_view(out), as_view(argmax),
                               as_stream(stream));
      },
      nb::arg("map"), nb::arg("features"), nb::arg("out"), nb::arg("argmax"),
      nb::arg("stream") = 0);
  m.def(
      "max_pool_backward",
      [](nb::ndarray<> inverse, nb::ndarray<> argmax, nb::ndarray<> grad_out,
         nb::ndarray<> grad_features, uintptr_t stream) {
        grid::max_pool_backward(as_view(inverse), as_view(argmax), as_view(grad_out),
                                as_view(grad_features), as_stream(stream));
      },
      nb::arg("inverse"), nb::arg("argmax"), nb::arg("grad_out"), nb::arg("grad_features"),
      nb::arg("stream") = 0);
  m.def(
      "avg_pool_forward",
      [](nb::ndarray<> map, nb::ndarray<> features, nb::ndarray<> out, uintptr_t stream) {
        grid::avg_pool_forward(as_view(map), as_view(features), as_view(out), as_stream(stream));
      },
      nb::arg("map"), nb::arg("features"), nb::arg("out"), nb::arg("stream") = 0);
  m.def(
      "avg_pool_backward",
      [](nb::ndarray<> map, nb::ndarray<> inverse, nb::ndarray<> grad_out,
         nb::ndarray<> grad_features, uintptr_t stream) {
        grid::avg_pool_backward(as_view(map), as_view(inverse), as_view(grad_out),
                                as_view(grad_features), as_stream(stream));
      },
      nb::arg("map"), nb::arg("inverse"), nb::arg("grad_out"), nb::arg("grad_features"),
      nb::arg("stream") = 0);

  // .nvdb files: features cross as DLPack capsules, one per tensor.
  m.def(
      "save_nvdb",
      [](const std::string& path, const GridBatch& g, std::vector<nb::capsule> features,
         std::vector<std::string> names, bool nanovdb_32_9) {
        std::vector<Tensor> tensors;
        for (nb::capsule& c : features) tensors.push_back(tensor_from_capsule(c));
        grid::save_nvdb(path, g, tensors, names,
                        nanovdb_32_9 ? grid::NvdbFormat::V32_9 : grid::NvdbFormat::V32_4);
      },
      nb::arg("path"), nb::arg("grid"), nb::arg("features"), nb::arg("names"),
      nb::arg("nanovdb_32_9") = true);
  m.def(
      "load_nvdb",
      [](const std::string& path) {
        grid::NvdbContents contents = grid::load_nvdb(path);
        nb::list features;
        for (const Tensor& t : contents.features) features.append(to_capsule(t));
        return nb::make_tuple(std::move(contents.grid), features, contents.names);
      },
      nb::arg("path"));
}

}  // namespace tilegrid::python
