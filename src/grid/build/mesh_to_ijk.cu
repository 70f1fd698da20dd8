// Triangle meshes to voxel coordinates on the GPU, for GridBatch.from_mesh: one thread a
// triangle counts the voxels it touches, a scan gives each triangle its output rows, and a
// second pass writes them (the same test again: cheaper than storing every candidate of a
// large triangle's bounding box). The coordinates then go to the ordinary from_ijk build.
#include <cub/device/device_scan.cuh>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/build/triangle_voxels.h"
#include "grid/grid_cuda.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 128;

template <class V, class F>
struct MeshArgs {
  const V* vertices;       // [num_vertices, 3]
  const int64_t* voff;     // [num_grids + 1]
  const F* faces;          // [num_faces, 3]
  const int64_t* foff;     // [num_grids + 1]
  int64_t num_grids, num_faces;
  const VoxelTransform* transforms;
};

// The triangle of face t in voxel coordinates, or the error that stops it.
template <class V, class F>
__device__ MeshError load_triangle(const MeshArgs<V, F>& m, int64_t t, VoxelTriangle& tri) {
  const int64_t b = tensor_of_row(m.foff, m.num_grids, t);
  const int64_t first = m.voff[b], count = m.voff[b + 1] - first;
  double world[3][3];
  for (int corner = 0; corner < 3; ++corner) {
    const int64_t index = int64_t(m.faces[3 * t + corner]);
    if (index < 0 || index >= count) return MeshError::BadFace;
    for (int a = 0; a < 3; ++a) world[corner][a] = double(m.vertices[3 * (first + index) + a]);
  }
  if (!to_voxel_triangle(m.transforms[b], world, tri)) return MeshError::NotFinite;
  if (!in_int32_range(tri)) return MeshError::OutOfRange;
  return MeshError::None;
}

template <class V, class F>
__global__ void count_touched(MeshArgs<V, F> m, int64_t* counts, int* error) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < m.num_faces;
       t += int64_t(gridDim.x) * blockDim.x) {
    VoxelTriangle tri;
    const MeshError e = load_triangle(m, t, tri);
    int64_t n = 0;
    if (e == MeshError::None)
      for_each_touched_voxel(tri, [&](int32_t, int32_t, int32_t) { ++n; });
    else
      atomicMax(error, int(e));
    counts[t] = n;
  }
}

template <class V, class F>
__global__ void write_touched(MeshArgs<V, F> m, const int64_t* starts, int32_t* xyz) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < m.num_faces;
       t += int64_t(gridDim.x) * blockDim.x) {
    VoxelTriangle tri;
    if (load_triangle(m, t, tri) != MeshError::None) continue;
    int32_t* out = xyz + 3 * starts[t];
    for_each_touched_voxel(tri, [&](int32_t i, int32_t j, int32_t k) {
      out[0] = i;
      out[1] = j;
      out[2] = k;
      out += 3;
    });
  }
}

// Row offsets of each grid's voxels: the scan's value at the grid's first face.
__global__ void grid_offsets(const int64_t* starts, const int64_t* foff, int64_t num_grids,
                             int64_t* out) {
  for (int64_t b = threadIdx.x; b <= num_grids; b += blockDim.x) out[b] = starts[foff[b]];
}

template <class V, class F>
MeshError run(const MeshArgs<V, F>& m, int device, Stream stream, MeshVoxels& out) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const Device dev = Device::cuda(device);
  // starts: n + 1 entries, starts[t] = voxels of the faces before t (so starts[n] = total).
  Tensor starts = Tensor::empty(Shape{m.num_faces + 1}, DType::Int64, dev, stream);
  Tensor error = Tensor::empty({1}, DType::Int32, dev, stream);
  int64_t* start = static_cast<int64_t*>(starts.data());
  int* err = static_cast<int*>(error.data());
  TG_CUDA_CHECK(cudaMemsetAsync(err, 0, sizeof(int), s));
  TG_CUDA_CHECK(cudaMemsetAsync(start, 0, sizeof(int64_t), s));
  if (m.num_faces > 0) {
    Tensor counts = Tensor::empty(Shape{m.num_faces}, DType::Int64, dev, stream);
    int64_t* count = static_cast<int64_t*>(counts.data());
    count_touched<<<grid_stride_blocks(m.num_faces, kThreads), kThreads, 0, s>>>(m, count, err);
    TG_CUDA_CHECK_LAUNCH();
    size_t bytes = 0;
    TG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes, count, start + 1, m.num_faces, s));
    Tensor temp = Tensor::empty({int64_t(std::max<size_t>(bytes, 1))}, DType::UInt8, dev, stream);
    TG_CUDA_CHECK(
        cub::DeviceScan::InclusiveSum(temp.data(), bytes, count, start + 1, m.num_faces, s));
  }
  int code = 0;
  TG_CUDA_CHECK(cudaMemcpyAsync(&code, err, sizeof(int), cudaMemcpyDeviceToHost, s));
  int64_t total = 0;
  TG_CUDA_CHECK(cudaMemcpyAsync(&total, start + m.num_faces, sizeof(int64_t),
                                cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  if (code != 0) return MeshError(code);

  out.xyz = Tensor::empty({total, 3}, DType::Int32, dev, stream);
  out.offsets = Tensor::empty(Shape{m.num_grids + 1}, DType::Int64, dev, stream);
  if (total > 0) {
    write_touched<<<grid_stride_blocks(m.num_faces, kThreads), kThreads, 0, s>>>(
        m, start, static_cast<int32_t*>(out.xyz.data()));
    TG_CUDA_CHECK_LAUNCH();
  }
  grid_offsets<<<1, 256, 0, s>>>(start, m.foff, m.num_grids,
                                 static_cast<int64_t*>(out.offsets.data()));
  TG_CUDA_CHECK_LAUNCH();
  return MeshError::None;
}

template <class V>
MeshError with_faces(const MeshInput& in, int device, Stream stream, MeshVoxels& out) {
  const auto* v = static_cast<const V*>(in.vertices);
  if (in.faces_dtype == DType::Int32)
    return run(MeshArgs<V, int32_t>{v, in.voff, static_cast<const int32_t*>(in.faces), in.foff,
                                    in.num_grids, in.num_faces, in.transforms},
               device, stream, out);
  return run(MeshArgs<V, int64_t>{v, in.voff, static_cast<const int64_t*>(in.faces), in.foff,
                                  in.num_grids, in.num_faces, in.transforms},
             device, stream, out);
}

}  // namespace

MeshError mesh_to_ijk(const MeshInput& in, int device, Stream stream, MeshVoxels& out) {
  CudaDeviceGuard guard(device);
  return in.vertices_dtype == DType::Float32 ? with_faces<float>(in, device, stream, out)
                                             : with_faces<double>(in, device, stream, out);
}

}  // namespace tilegrid::grid::cuda
