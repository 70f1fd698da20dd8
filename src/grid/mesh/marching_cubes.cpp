// marching_cubes: argument checks, the CPU passes (counts, scans, writes, on every core) and
// dispatch to the CUDA kernels (marching_cubes_cuda.cu); both run marching_cubes_cells.h.
#include "tilegrid/grid/marching_cubes.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda_build.h"
#include "core/parallel_for.h"
#include "grid/mesh/marching_cubes_cells.h"
#include "tilegrid/core/checks.h"
#include "tilegrid/core/error.h"
#ifdef TILEGRID_WITH_CUDA
#include "grid/mesh/marching_cubes_cuda.h"
#endif

namespace tilegrid::grid {

CubeMesh marching_cubes(const GridBatch& grid, const TensorView& field, double level,
                        Stream stream) {
  constexpr const char* kOp = "marching_cubes";
  check_dtype(kOp, "field", field, {DType::Float32, DType::Float64});
  check_shape(kOp, "field", field, {grid.total_voxels()});
  check_contiguous(kOp, "field", field);
  TG_CHECK_VALUE(field.device == grid.device(), kOp, ": field must be on the grid's device (",
                 grid.device(), "), got ", field.device);
  TG_CHECK_VALUE(std::isfinite(level), kOp, ": level must be finite, got ", level);
  const JaggedTensor ijk = grid.ijk(stream);
  const int64_t N = grid.total_voxels(), B = grid.num_grids();
  const CubeInputs in{grid.view(),
                      grid.transforms(),
                      grid.voxel_offsets().view().data_ptr<const int64_t>(),
                      B,
                      ijk.jdata().view().data_ptr<const int32_t>(),
                      field.data,
                      field.dtype == DType::Float64,
                      level,
                      &kMarchingCubesTable};
  if (grid.device().is_cuda()) {
    require_cuda_build("marching_cubes");
#ifdef TILEGRID_WITH_CUDA
    return cuda::marching_cubes(in, N, field.dtype, grid.device().index, stream);
#endif
  }
  std::vector<uint8_t> cross(static_cast<size_t>(N));
  std::vector<int32_t> config(static_cast<size_t>(N));
  std::vector<int32_t> triangles(static_cast<size_t>(N));
  parallel_for(N, [&](int64_t r) {
    cube_counts(in, r, cross[size_t(r)], config[size_t(r)], triangles[size_t(r)]);
  });
  std::vector<int64_t> vertex_base(static_cast<size_t>(N + 1)), triangle_base(static_cast<size_t>(N + 1));
  for (int64_t r = 0; r < N; ++r) {
    const int m = cross[size_t(r)];
    vertex_base[size_t(r + 1)] = vertex_base[size_t(r)] + (m & 1) + ((m >> 1) & 1) + ((m >> 2) & 1);
    triangle_base[size_t(r + 1)] = triangle_base[size_t(r)] + triangles[size_t(r)];
  }
  const DType dt = field.dtype;
  CubeMesh mesh;
  mesh.vertices = Tensor::empty({vertex_base[size_t(N)], 3}, dt, Device::cpu());
  mesh.normals = Tensor::empty({vertex_base[size_t(N)], 3}, dt, Device::cpu());
  mesh.faces = Tensor::empty({triangle_base[size_t(N)], 3}, DType::Int64, Device::cpu());
  parallel_for(N, [&](int64_t r) {
    cube_write(in, r, cross.data(), vertex_base.data(), config[size_t(r)], triangle_base[size_t(r)],
               mesh.vertices.data(), mesh.normals.data(), static_cast<int64_t*>(mesh.faces.data()));
  });
  mesh.vertex_offsets = Tensor::empty({B + 1}, DType::Int64, Device::cpu());
  mesh.face_offsets = Tensor::empty({B + 1}, DType::Int64, Device::cpu());
  for (int64_t b = 0; b <= B; ++b) {
    static_cast<int64_t*>(mesh.vertex_offsets.data())[b] = vertex_base[size_t(in.voxel_offsets[b])];
    static_cast<int64_t*>(mesh.face_offsets.data())[b] = triangle_base[size_t(in.voxel_offsets[b])];
  }
  return mesh;
}

}  // namespace tilegrid::grid
