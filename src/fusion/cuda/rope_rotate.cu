// RoPE rotation on CUDA: one read and one write of each element. Memory-bound: at the Llama-3
// 8B QKV gradient's q and k columns (8192 x 5120 bfloat16) that is 168 MB; on an H200 the two
// calls (q, then k) took 48 us a step together, 3.5 TB/s (profiled inside the layer:
// bench/results/2026-12-04_h200_llama_block_kernels.txt); a pair's sine and cosine come from the
// special-function unit (pairwise.h's sin_cos), 2 of its operations a pair: 1.2e12 a second at
// that rate, against the H200's 4.2e12 (16 a clock an SM).
//  - a thread owns one 16-byte vector of columns (VEC / 2 pairs; one pair when a row start is
//    not 16-byte aligned) and keeps its pairs' frequencies in registers for its rows;
//  - blockDim.x threads cover a row's vectors, blockDim.y rows share a block when rows are
//    short, and grid.y walks the rows (looping only past the grid-size limit).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/cuda_convert.cuh"
#include "fusion/rope_rotate_cuda.h"
#include "tilegrid/gemm/epilogue/pairwise.h"

namespace tilegrid::rope {
namespace {

using cuda_convert::from_float;
using cuda_convert::to_float;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

__device__ __forceinline__ float position_at(const Params& p, int64_t row) {
  if (p.position_dtype == DType::Int32) return float(static_cast<const int32_t*>(p.positions)[row]);
  return float(static_cast<const int64_t*>(p.positions)[row]);
}

// VEC columns starting at `col` of a row: one aligned vector access for VEC > 2, two element
// accesses (no alignment beyond the element's) for the one-pair fallback.
template <class T, int VEC>
__device__ __forceinline__ void load(const T* row, int64_t col, float (&v)[VEC]) {
  if constexpr (VEC == 2) {
    v[0] = to_float(row[col]);
    v[1] = to_float(row[col + 1]);
  } else {
    const Vec<T, VEC> in = *reinterpret_cast<const Vec<T, VEC>*>(row + col);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = to_float(in.v[k]);
  }
}

template <class T, int VEC>
__device__ __forceinline__ void store(T* row, int64_t col, const float (&v)[VEC]) {
  if constexpr (VEC == 2) {
    row[col] = from_float<T>(v[0]);
    row[col + 1] = from_float<T>(v[1]);
  } else {
    Vec<T, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = from_float<T>(v[k]);
    *reinterpret_cast<Vec<T, VEC>*>(row + col) = out;
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kThreads) rotate_kernel(Params p) {
  constexpr int kPairs = VEC / 2;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (col >= p.width) return;
  // This thread's pairs and their frequencies, negated for the inverse rotation as the
  // epilogue negates them: the angle is float(position) * frequency in both.
  float frequency[kPairs];
  int64_t j = (col / 2) % p.half;
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    frequency[k] = p.inverse ? -p.inv_freq[j] : p.inv_freq[j];
    j = j + 1 == p.half ? 0 : j + 1;
  }
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < p.rows; r += row_step) {
    const float position = position_at(p, r);
    float v[VEC];
    load<T, VEC>(x + r * p.x_row_stride, col, v);
#pragma unroll
    for (int k = 0; k < kPairs; ++k)
      epilogue::rotate_pair(v[2 * k], v[2 * k + 1], position * frequency[k]);
    store<T, VEC>(out + r * p.out_row_stride, col, v);
  }
}

bool aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <class T, int VEC>
void launch(const Params& p, cudaStream_t stream) {
  const int64_t vectors = (p.width + VEC - 1) / VEC;
  const int tx = int(std::min<int64_t>(kThreads, (vectors + 31) / 32 * 32));
  const int ty = kThreads / tx;
  const dim3 block(tx, ty);
  const dim3 grid(unsigned((vectors + tx - 1) / tx),
                  unsigned(std::min<int64_t>(kMaxGridY, (p.rows + ty - 1) / ty)));
  rotate_kernel<T, VEC><<<grid, block, 0, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH();
}

// 16-byte accesses when every row start of x and out is 16-byte aligned (width and both row
// strides multiples of VEC, base pointers aligned); one pair a thread otherwise.
template <class T>
void launch_for(const Params& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = p.width % kVec == 0 && p.x_row_stride % kVec == 0 &&
                          p.out_row_stride % kVec == 0 && aligned(p.x, 16) && aligned(p.out, 16);
  if (vectorized)
    launch<T, kVec>(p, stream);
  else
    launch<T, 2>(p, stream);
}

}  // namespace

void rotate_cuda(const Params& p, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (p.dtype) {
    case DType::Float32:
      return launch_for<float>(p, s);
    case DType::Float16:
      return launch_for<__half>(p, s);
    default:
      return launch_for<__nv_bfloat16>(p, s);
  }
}

}  // namespace tilegrid::rope
