// marching_cubes on the GPU: one thread a voxel for the counts and for the writes
// (marching_cubes_cells.h, the CPU's code, compiled without FMA contraction), cub scans.
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"
#include "grid/mesh/marching_cubes_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 128;
__constant__ MarchingCubesTable kDeviceTable = kMarchingCubesTable;

__global__ void counts_kernel(CubeInputs in, int64_t n, uint8_t* cross, int32_t* config,
                              int64_t* vertices, int64_t* triangles) {
  in.table = &kDeviceTable;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    int32_t t = 0;
    cube_counts(in, r, cross[r], config[r], t);
    const int m = cross[r];
    vertices[r] = (m & 1) + ((m >> 1) & 1) + ((m >> 2) & 1);
    triangles[r] = t;
  }
}

__global__ void write_kernel(CubeInputs in, int64_t n, const uint8_t* cross, const int32_t* config,
                             const int64_t* vertex_base, const int64_t* triangle_base,
                             void* vertices, void* normals, int64_t* faces) {
  in.table = &kDeviceTable;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x)
    cube_write(in, r, cross, vertex_base, config[r], triangle_base[r], vertices, normals, faces);
}

__global__ void offsets_kernel(const int64_t* voxel_offsets, int64_t num_grids,
                               const int64_t* vertex_base, const int64_t* triangle_base,
                               int64_t* vertex_offsets, int64_t* face_offsets) {
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b <= num_grids;
       b += int64_t(gridDim.x) * blockDim.x) {
    vertex_offsets[b] = vertex_base[voxel_offsets[b]];
    face_offsets[b] = triangle_base[voxel_offsets[b]];
  }
}

// out[0] = 0, out[r + 1] = sum of counts[0..r] (counts: [n]); returns the total (synchronises).
int64_t scan(const int64_t* counts, int64_t n, int64_t* out, const Device& dev, Stream stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  TG_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(int64_t), s));
  if (n == 0) return 0;
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes, counts, out + 1, n, s));
  Tensor scratch = Tensor::empty({int64_t(bytes) + 1}, DType::UInt8, dev, stream);
  TG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scratch.data(), bytes, counts, out + 1, n, s));
  int64_t total = 0;
  TG_CUDA_CHECK(cudaMemcpyAsync(&total, out + n, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  return total;
}

}  // namespace

CubeMesh marching_cubes(const CubeInputs& in, int64_t voxels, DType dtype, int device,
                        Stream stream) {
  CudaDeviceGuard guard(device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  const Device dev = Device::cuda(device);
  const int64_t n1 = std::max<int64_t>(voxels, 1);
  Tensor cross = Tensor::empty({n1}, DType::UInt8, dev, stream);
  Tensor config = Tensor::empty({n1}, DType::Int32, dev, stream);
  Tensor vcount = Tensor::empty({n1}, DType::Int64, dev, stream);
  Tensor tcount = Tensor::empty({n1}, DType::Int64, dev, stream);
  Tensor vbase = Tensor::empty({voxels + 1}, DType::Int64, dev, stream);
  Tensor tbase = Tensor::empty({voxels + 1}, DType::Int64, dev, stream);
  auto* cr = static_cast<uint8_t*>(cross.data());
  auto* cf = static_cast<int32_t*>(config.data());
  auto* vb = static_cast<int64_t*>(vbase.data());
  auto* tb = static_cast<int64_t*>(tbase.data());
  if (voxels > 0) {
    counts_kernel<<<grid_stride_blocks(voxels, kThreads), kThreads, 0, s>>>(
        in, voxels, cr, cf, static_cast<int64_t*>(vcount.data()),
        static_cast<int64_t*>(tcount.data()));
    TG_CUDA_CHECK_LAUNCH();
  }
  const int64_t num_vertices = scan(static_cast<int64_t*>(vcount.data()), voxels, vb, dev, stream);
  const int64_t num_faces = scan(static_cast<int64_t*>(tcount.data()), voxels, tb, dev, stream);
  CubeMesh mesh;
  mesh.vertices = Tensor::empty({num_vertices, 3}, dtype, dev, stream);
  mesh.normals = Tensor::empty({num_vertices, 3}, dtype, dev, stream);
  mesh.faces = Tensor::empty({num_faces, 3}, DType::Int64, dev, stream);
  mesh.vertex_offsets = Tensor::empty({in.num_grids + 1}, DType::Int64, dev, stream);
  mesh.face_offsets = Tensor::empty({in.num_grids + 1}, DType::Int64, dev, stream);
  if (voxels > 0) {
    write_kernel<<<grid_stride_blocks(voxels, kThreads), kThreads, 0, s>>>(
        in, voxels, cr, cf, vb, tb, mesh.vertices.data(), mesh.normals.data(),
        static_cast<int64_t*>(mesh.faces.data()));
    TG_CUDA_CHECK_LAUNCH();
  }
  offsets_kernel<<<grid_stride_blocks(in.num_grids + 1, kThreads), kThreads, 0, s>>>(
      in.voxel_offsets, in.num_grids, vb, tb, static_cast<int64_t*>(mesh.vertex_offsets.data()),
      static_cast<int64_t*>(mesh.face_offsets.data()));
  TG_CUDA_CHECK_LAUNCH();
  return mesh;
}

}  // namespace tilegrid::grid::cuda
