#pragma once
// RMSNorm CUDA kernels (internal). Memory-bound: the forward moves 2 bytes in and 2 out
// per bf16 element, so the design goal is a single pass over x at near copy bandwidth:
//  - a row is split over TPR threads (blockDim.x, a multiple of 32) and held in registers,
//    ITEMS vectors of VEC elements per thread (VEC * sizeof(T) = 16 bytes when rows are
//    aligned, 1 element otherwise, e.g. odd hidden sizes), so x is read from memory once;
//    the same structure as the Triton kernels of Liger-Kernel, which reach ~96% of copy
//    bandwidth on an H200;
//  - RPB rows share a block (blockDim.y) when rows are short, keeping 256 threads a block;
//  - the backward's grid is persistent (as many blocks as fit loop over row groups), which
//    lets it keep its weight-gradient partial sums in registers across rows;
//  - rows too long for registers (see choose_shape) take the streaming kernels, which read
//    the row twice (the second read mostly hits L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda_convert.cuh"
#include "fusion/rms_norm_params.h"

namespace tilegrid::rms_norm::kernels {

constexpr int kMaxRowsPerBlock = 8;
// Register-resident kernels run at most 512 threads a block, so the compiler may give each
// thread up to 128 registers; the streaming kernels run up to 1024.
constexpr int kMaxRegisterThreads = 512;

using cuda_convert::from_float;
using cuda_convert::to_float;

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

// Sum of `v` over the blockDim.x threads that share threadIdx.y; every thread of the block
// must call it. One barrier: warp sums go to `scratch`, then every thread adds them all up.
// Successive calls alternate between the two halves of scratch (`parity`), so a fast thread's
// next write can never land on a half that a slow thread is still reading.
__device__ __forceinline__ float row_sum(float v, float (*scratch)[kMaxRowsPerBlock][32],
                                         int parity) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (blockDim.x == 32) return v;
  const int warps = blockDim.x / 32;
  float* sums = scratch[parity][threadIdx.y];
  if (threadIdx.x % 32 == 0) sums[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.f;
  for (int w = 0; w < warps; ++w) v += sums[w];
  return v;
}

// Loads VEC weights at `col` as floats (ones when there is no weight).
template <class W, int VEC>
__device__ __forceinline__ void load_weight(const void* weight, int64_t col, float (&w)[VEC]) {
  if (weight != nullptr) {
    load_vec<W, VEC>(static_cast<const W*>(weight) + col, w);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) w[k] = 1.f;
  }
}

// Loads this thread's ITEMS vectors of `row` as floats (zeros past the row's end or the last
// row).
template <class T, int VEC, int ITEMS>
__device__ __forceinline__ void load_row(const RowMatrix& m, int64_t row, int64_t rows,
                                         int64_t hidden, float (&v)[ITEMS][VEC]) {
  const T* base = static_cast<const T*>(m.data) + row * m.row_stride;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
    if (row < rows && col < hidden) {
      load_vec<T, VEC>(base + col, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i][k] = 0.f;
    }
  }
}

// This thread's ITEMS vectors of the weight, kept in the weight's storage type (8 bf16 values
// take 4 registers) and converted where used; ones where there is no weight or past the end.
template <class W, int VEC, int ITEMS, bool EXACT = false>
__device__ __forceinline__ void load_weight_slice(const void* weight, int hidden,
                                                  Vec<W, VEC> (&w)[ITEMS]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * int(blockDim.x) + int(threadIdx.x)) * VEC;
    if (weight != nullptr && (EXACT || col < hidden)) {
      w[i] = *reinterpret_cast<const Vec<W, VEC>*>(static_cast<const W*>(weight) + col);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) w[i].v[k] = from_float<W>(1.f);
    }
  }
}

// This thread's ITEMS vectors of `row` in their storage type (8 bf16 values in 4 registers,
// converted where used; zeros past the row's end or the last row). Column offsets are 32-bit:
// the register-resident kernels take rows of at most kMaxRegisterThreads * 8 * VEC elements.
template <class T, int VEC, int ITEMS>
__device__ __forceinline__ void load_packed_row(const RowMatrix& m, int64_t row, int64_t rows,
                                                int hidden, Vec<T, VEC> (&v)[ITEMS]) {
  const T* base = static_cast<const T*>(m.data) + row * m.row_stride;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * int(blockDim.x) + int(threadIdx.x)) * VEC;
    if (row < rows && col < hidden) {
      v[i] = *reinterpret_cast<const Vec<T, VEC>*>(base + col);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i].v[k] = from_float<T>(0.f);
    }
  }
}

// One block per group of blockDim.y rows, for any hidden size that fits in registers. x and
// the weight are both loaded before the reduction, so their latencies overlap (loading the
// weight only after the reduction put an extra dependent load on every row and held the
// forward near 81% of copy bandwidth). x and the weight stay packed in their storage types
// (a 16-byte vector is 4 registers, against 8 as floats) and column offsets are 32-bit.
// Rows of exactly THREADS * ITEMS 16-byte vectors take forward_row_kernel below instead.
// The launcher caps it at 48 registers for blocks of up to 256 threads (5 blocks a SM; at
// 40 it spills 22 bytes) and 64 for larger ones.
template <class T, class W, int VEC, int ITEMS, int MAX_THREADS, int MIN_BLOCKS>
__global__ void __launch_bounds__(MAX_THREADS, MIN_BLOCKS) forward_kernel(ForwardParams p) {
  __shared__ float scratch[2][kMaxRowsPerBlock][32];
  const int hidden = static_cast<int>(p.hidden);
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  Vec<T, VEC> x[ITEMS];
  Vec<W, VEC> w[ITEMS];
  load_packed_row<T, VEC, ITEMS>(p.x, row, p.rows, hidden, x);
  load_weight_slice<W, VEC, ITEMS>(p.weight, hidden, w);
  float sum_sq = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float v = to_float(x[i].v[k]);
      sum_sq += v * v;
    }
  const float rstd = rsqrtf(row_sum(sum_sq, scratch, 0) / float(hidden) + p.eps);
  if (row >= p.rows) return;
  if (p.rstd != nullptr && threadIdx.x == 0) p.rstd[row] = rstd;
  T* y = static_cast<T*>(p.y.data) + row * p.y.row_stride;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * int(blockDim.x) + int(threadIdx.x)) * VEC;
    if (col >= hidden) continue;
    float out[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = to_float(x[i].v[k]) * (rstd * to_float(w[i].v[k]));
    store_vec<T, VEC>(y + col, out);
  }
}

// The common hidden sizes (a row of exactly THREADS * ITEMS 16-byte vectors: 2048, 4096 and
// 8192 in bf16/fp16) with a weight take a kernel with nothing to check: one row per block,
// block size and row length known at compile time. Registers decide the speed (checking for
// a null weight alone costs 2 registers and a spill at the 40-register cap). [32768, 4096]
// bf16 on an H200, steady state (bench/cuda/rms_norm_forward_lean.cu): the general kernel
// with x held as floats, 48 registers and 5 blocks a SM: 88.4% of copy bandwidth; this shape
// with x packed, 42 registers, 5 blocks: 96.1%; at 38 registers, 6 blocks: 97.6% (Liger-
// Kernel's Triton kernel's occupancy); at 32, 8 blocks: 96.5%.
template <class T, class W, int ITEMS, int THREADS, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) forward_row_kernel(ForwardParams p) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int kHidden = THREADS * ITEMS * VEC;
  __shared__ float warp_sums[THREADS / 32];
  const int64_t row = blockIdx.x;
  const T* xr = static_cast<const T*>(p.x.data) + row * p.x.row_stride;
  Vec<T, VEC> x[ITEMS];
  Vec<W, VEC> w[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
    x[i] = *reinterpret_cast<const Vec<T, VEC>*>(xr + (i * THREADS + int(threadIdx.x)) * VEC);
  const W* weight = static_cast<const W*>(p.weight);  // never null here (see the launcher)
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
    w[i] = *reinterpret_cast<const Vec<W, VEC>*>(weight + (i * THREADS + int(threadIdx.x)) * VEC);
  float sum_sq = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float v = to_float(x[i].v[k]);
      sum_sq += v * v;
    }
  }
  // The same additions in the same order as row_sum, so both kernels give the same bits.
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
  __syncthreads();
  sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < THREADS / 32; ++k) sum_sq += warp_sums[k];
  const float rstd = rsqrtf(sum_sq * (1.f / float(kHidden)) + p.eps);
  if (p.rstd != nullptr && threadIdx.x == 0) p.rstd[row] = rstd;
  T* y = static_cast<T*>(p.y.data) + row * p.y.row_stride;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    float out[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = to_float(x[i].v[k]) * (rstd * to_float(w[i].v[k]));
    store_vec<T, VEC>(y + (i * THREADS + int(threadIdx.x)) * VEC, out);
  }
}

// dx = rstd * (g - xhat * mean(xhat * g)) with g = w * dy and xhat = x * rstd. The grid is
// persistent (as many blocks as fit loop over the row groups): each thread holds its slice of
// the weight and of the weight-gradient sums in registers across all its rows, and writes the
// sums once, as one float32 partial row per (block, threadIdx.y); reduce_weight_partials adds
// those up.
template <class T, class W, int VEC, int ITEMS>
__global__ void __launch_bounds__(kMaxRegisterThreads)
    backward_kernel(BackwardParams p, float* dw_partial) {
  __shared__ float scratch[2][kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden;
  const float inv_hidden = 1.f / float(hidden);
  Vec<W, VEC> w[ITEMS];
  float dw[ITEMS][VEC];
  load_weight_slice<W, VEC, ITEMS>(p.weight, hidden, w);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) dw[i][k] = 0.f;

  int parity = 0;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < p.rows;
       base += int64_t(gridDim.x) * blockDim.y, parity ^= 1) {
    const int64_t row = base + threadIdx.y;
    const bool active = row < p.rows;
    float xhat[ITEMS][VEC], dyv[ITEMS][VEC];
    load_row<T, VEC, ITEMS>(p.x, row, p.rows, hidden, xhat);
    load_row<T, VEC, ITEMS>(p.dy, row, p.rows, hidden, dyv);
    const float rstd = active ? p.rstd[row] : 0.f;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        xhat[i][k] *= rstd;
        dot += xhat[i][k] * to_float(w[i].v[k]) * dyv[i][k];
        dw[i][k] += dyv[i][k] * xhat[i][k];
      }
    const float mean_dot = row_sum(dot, scratch, parity) * inv_hidden;
    if (!active) continue;
    T* dx = static_cast<T*>(p.dx.data) + row * p.dx.row_stride;
    const T* dres = static_cast<const T*>(p.dresidual.data);
    if (dres != nullptr) dres += row * p.dresidual.row_stride;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int64_t col = (int64_t(i) * blockDim.x + threadIdx.x) * VEC;
      if (col >= hidden) continue;
      float out[VEC], residual[VEC] = {};
      if (dres != nullptr) load_vec<T, VEC>(dres + col, residual);
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        out[k] = rstd * (to_float(w[i].v[k]) * dyv[i][k] - xhat[i][k] * mean_dot) + residual[k];
      store_vec<T, VEC>(dx + col, out);
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
  __shared__ float scratch[2][kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden, step = int64_t(blockDim.x) * VEC;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x, parity ^= 1) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.row_stride;
    float sum_sq = 0.f;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < hidden; col += step) {
      float v[VEC];
      load_vec<T, VEC>(x + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum_sq += v[k] * v[k];
    }
    const float rstd = rsqrtf(row_sum(sum_sq, scratch, parity) / float(hidden) + p.eps);
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
__global__ void __launch_bounds__(1024)
    backward_streaming_kernel(BackwardParams p, float* dw_partial) {
  __shared__ float scratch[2][kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden, step = int64_t(blockDim.x) * VEC;
  float* partial = dw_partial ? dw_partial + int64_t(blockIdx.x) * hidden : nullptr;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x, parity ^= 1) {
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
    const float mean_dot = row_sum(dot, scratch, parity) / float(hidden);
    T* dx = static_cast<T*>(p.dx.data) + row * p.dx.row_stride;
    const T* dres = static_cast<const T*>(p.dresidual.data);
    if (dres != nullptr) dres += row * p.dresidual.row_stride;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < hidden; col += step) {
      float xv[VEC], dyv[VEC], w[VEC], out[VEC], residual[VEC] = {};
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      load_weight<W, VEC>(p.weight, col, w);
      if (dres != nullptr) load_vec<T, VEC>(dres + col, residual);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float xhat = xv[k] * rstd;
        out[k] = rstd * (w[k] * dyv[k] - xhat * mean_dot) + residual[k];
        if (partial) partial[col + k] += dyv[k] * xhat;
      }
      store_vec<T, VEC>(dx + col, out);
    }
  }
}

}  // namespace tilegrid::rms_norm::kernels
