#pragma once
// RMSNorm CUDA kernels (internal). Memory-bound: the forward moves 2 bytes in and 2 out
// per bf16 element, so the design goal is a single pass over x at near copy bandwidth:
//  - a row is split over TPR threads (blockDim.x, a multiple of 32) and held in registers,
//    ITEMS vectors of VEC elements per thread (VEC * sizeof(T) = 16 bytes when rows are
//    aligned, 1 element otherwise, e.g. odd hidden sizes), so x is read from memory once;
//  - RPB rows share a block (blockDim.y) when rows are short, keeping 256 threads a block;
//  - the backward's grid is persistent (as many blocks as fit loop over row groups), which
//    lets it keep its weight-gradient partial sums in registers across rows;
//  - rows too long for registers (see choose_shape) take the streaming kernels, which read
//    the row twice (the second read mostly hits L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fusion/rms_norm_params.h"

namespace tilegrid::rms_norm::kernels {

constexpr int kMaxRowsPerBlock = 8;
// Register-resident kernels run at most 512 threads a block, so the compiler may give each
// thread up to 128 registers; the streaming kernels run up to 1024.
constexpr int kMaxRegisterThreads = 512;

template <class T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// VEC consecutive elements moved as one aligned access (16 bytes for the fast path).
template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

template <class T, int VEC>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[VEC]) {
  Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = to_float(v.v[k]);
}

template <class T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Vec<T, VEC> v;
#pragma unroll
  for (int k = 0; k < VEC; ++k) v.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<Vec<T, VEC>*>(p) = v;
}

// Sum of `v` over the blockDim.x threads that share threadIdx.y. Every thread of the block
// must call it (it synchronises when a row spans several warps).
__device__ __forceinline__ float row_sum(float v, float (*scratch)[32]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[threadIdx.y][warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[threadIdx.y][lane] : 0.f;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Loads VEC weights at `col` as floats (ones when there is no weight). The weight is re-read
// for every row rather than held in registers: it stays in L1 (a 4096-wide bf16 row is 8 KB),
// and the registers it would take cost occupancy, which is what keeps enough bytes in flight.
template <class W, int VEC>
__device__ __forceinline__ void load_weight(const void* weight, int64_t col, float (&w)[VEC]) {
  if (weight != nullptr) {
    load_vec<W, VEC>(static_cast<const W*>(weight) + col, w);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) w[k] = 1.f;
  }
}

template <class T, int VEC>
__device__ __forceinline__ float to_float(const Vec<T, VEC>& v, int k) {
  return to_float(v.v[k]);
}

// Loads this thread's ITEMS vectors of `row` (zeros past the row's end or the last row).
template <class T, int VEC, int ITEMS>
__device__ __forceinline__ void load_row(const RowMatrix& m, int64_t row, int64_t rows,
                                         int64_t hidden, Vec<T, VEC> (&v)[ITEMS]) {
  const T* base = static_cast<const T*>(m.data) + row * m.row_stride;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
    if (row < rows && col < hidden) {
      v[i] = *reinterpret_cast<const Vec<T, VEC>*>(base + col);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i].v[k] = from_float<T>(0.f);
    }
  }
}

// Rows are kept in registers in their storage type (8 bf16 values take 4 registers, not 8),
// again for occupancy. The forward is launched with one block per row group (no persistent
// loop): blocks that wait on memory are many and the SM switches between them. Holding a
// prefetched next row in registers instead cost occupancy and did not pay (86% of copy
// bandwidth either way on an H200).
template <class T, class W, int VEC, int ITEMS>
__global__ void __launch_bounds__(kMaxRegisterThreads) forward_kernel(ForwardParams p) {
  __shared__ float scratch[kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden;
  const float inv_hidden = 1.f / float(hidden);

  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < p.rows;
       base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    Vec<T, VEC> v[ITEMS];
    load_row<T, VEC, ITEMS>(p.x, row, p.rows, hidden, v);
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum_sq += to_float(v[i], k) * to_float(v[i], k);
    const float rstd = rsqrtf(row_sum(sum_sq, scratch) * inv_hidden + p.eps);
    if (row < p.rows) {
      if (p.rstd != nullptr && threadIdx.x == 0) p.rstd[row] = rstd;
      T* y = static_cast<T*>(p.y.data) + row * p.y.row_stride;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
        if (col >= hidden) continue;
        float w[VEC], out[VEC];
        load_weight<W, VEC>(p.weight, col, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) out[k] = to_float(v[i], k) * rstd * w[k];
        store_vec<T, VEC>(y + col, out);
      }
    }
  }
}

// dx = rstd * (g - xhat * mean(xhat * g)) with g = w * dy and xhat = x * rstd. The weight
// gradient is accumulated in float32 registers over the rows this thread visits (the grid is
// persistent: a few blocks per SM loop over the rows) and written as one partial row per
// (block, threadIdx.y); reduce_partials_kernel sums them.
template <class T, class W, int VEC, int ITEMS>
__global__ void __launch_bounds__(kMaxRegisterThreads) backward_kernel(BackwardParams p,
                                                                       float* dw_partial) {
  __shared__ float scratch[kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden;
  const float inv_hidden = 1.f / float(hidden);
  float dw[ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) dw[i][k] = 0.f;

  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < p.rows;
       base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool active = row < p.rows;
    Vec<T, VEC> xv[ITEMS], dyv[ITEMS];
    load_row<T, VEC, ITEMS>(p.x, row, p.rows, hidden, xv);
    load_row<T, VEC, ITEMS>(p.dy, row, p.rows, hidden, dyv);
    const float rstd = active ? p.rstd[row] : 0.f;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
      if (col >= hidden) continue;
      float w[VEC];
      load_weight<W, VEC>(p.weight, col, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float xhat = to_float(xv[i], k) * rstd, d = to_float(dyv[i], k);
        dot += xhat * w[k] * d;
        dw[i][k] += d * xhat;
      }
    }
    const float mean_dot = row_sum(dot, scratch) * inv_hidden;
    if (active) {
      T* dx = static_cast<T*>(p.dx.data) + row * p.dx.row_stride;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
        if (col >= hidden) continue;
        float w[VEC], out[VEC];
        load_weight<W, VEC>(p.weight, col, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xhat = to_float(xv[i], k) * rstd;
          out[k] = rstd * (w[k] * to_float(dyv[i], k) - xhat * mean_dot);
        }
        store_vec<T, VEC>(dx + col, out);
      }
    }
  }

  if (dw_partial == nullptr) return;
  float* out = dw_partial + (int64_t(blockIdx.x) * blockDim.y + threadIdx.y) * hidden;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
    if (col < hidden) store_vec<float, VEC>(out + col, dw[i]);
  }
}

// Streaming variants for rows too long to keep in registers: two passes over each row.
template <class T, class W, int VEC>
__global__ void __launch_bounds__(1024) forward_streaming_kernel(ForwardParams p) {
  __shared__ float scratch[kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden, step = int64_t(blockDim.x) * VEC;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.row_stride;
    float sum_sq = 0.f;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < hidden; col += step) {
      float v[VEC];
      load_vec<T, VEC>(x + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum_sq += v[k] * v[k];
    }
    const float rstd = rsqrtf(row_sum(sum_sq, scratch) / float(hidden) + p.eps);
    if (p.rstd != nullptr && threadIdx.x == 0) p.rstd[row] = rstd;
    T* y = static_cast<T*>(p.y.data) + row * p.y.row_stride;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < hidden; col += step) {
      float v[VEC], w[VEC];
      load_vec<T, VEC>(x + col, v);
      load_weight<W, VEC>(p.weight, col, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] *= rstd * w[k];
      store_vec<T, VEC>(y + col, v);
    }
  }
}

// dw_partial ([gridDim.x, hidden], zeroed by the launcher) is updated in place: each block
// owns its row of partials, so no atomics are needed.
template <class T, class W, int VEC>
__global__ void __launch_bounds__(1024) backward_streaming_kernel(BackwardParams p,
                                                                  float* dw_partial) {
  __shared__ float scratch[kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden, step = int64_t(blockDim.x) * VEC;
  float* partial = dw_partial ? dw_partial + int64_t(blockIdx.x) * hidden : nullptr;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.row_stride;
    const T* dy = static_cast<const T*>(p.dy.data) + row * p.dy.row_stride;
    const float rstd = p.rstd[row];
    float dot = 0.f;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < hidden; col += step) {
      float xv[VEC], dyv[VEC], w[VEC];
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      load_weight<W, VEC>(p.weight, col, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) dot += xv[k] * rstd * w[k] * dyv[k];
    }
    const float mean_dot = row_sum(dot, scratch) / float(hidden);
    T* dx = static_cast<T*>(p.dx.data) + row * p.dx.row_stride;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < hidden; col += step) {
      float xv[VEC], dyv[VEC], w[VEC], out[VEC];
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      load_weight<W, VEC>(p.weight, col, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float xhat = xv[k] * rstd;
        out[k] = rstd * (w[k] * dyv[k] - xhat * mean_dot);
        if (partial) partial[col + k] += dyv[k] * xhat;
      }
      store_vec<T, VEC>(dx + col, out);
    }
  }
}

}  // namespace tilegrid::rms_norm::kernels
