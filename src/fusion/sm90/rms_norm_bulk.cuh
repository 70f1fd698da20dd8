#pragma once
// RMSNorm for Hopper (sm_90a): rows stream into shared memory through the bulk copy engine
// (cp.async.bulk, completing on an mbarrier), STAGES rows ahead of the threads (internal).
//
// Why: the register-resident kernels (../cuda/rms_norm_kernels.cuh) can only keep as many
// bytes in flight as their registers hold, which capped the forward at about 86% of copy
// bandwidth on an H200. Here the bytes in flight live in shared memory: a block of 256
// threads keeps STAGES rows (x, and dy in the backward) in flight whatever its register count.
//
// Per row: wait for its stage; pass 1 reads the row from shared memory and reduces (sum of
// squares, or the backward's dot product); pass 2 reads it again and writes the output
// straight from registers to global memory; a barrier; thread 0 refills the stage with the
// row STAGES iterations ahead. The weight is copied to shared memory once per block; the
// backward's weight-gradient sums live in shared memory too (each thread owns its columns),
// so no register array depends on the row length and any hidden size that fits runs here.
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "fusion/cuda/rms_norm_kernels.cuh"

namespace tilegrid::rms_norm::sm90 {

using kernels::from_float;
using kernels::load_vec;
using kernels::row_sum;
using kernels::store_vec;
using Barrier = cutlass::arch::ClusterTransactionBarrier;

constexpr int kThreads = 256;
constexpr int kMaxStages = 4;

// Shared-memory layout of one block: [weight | weight-gradient sums | stage 0 | stage 1 ...].
// Each part starts at a multiple of 128 bytes (bulk copies need 16).
struct Layout {
  int64_t weight = 0, dweight = 0, stages = 0, stage_bytes = 0, total = 0;
  int num_stages = 0;
};

inline int64_t round128(int64_t bytes) { return (bytes + 127) / 128 * 128; }

// `operand_rows`: rows copied per stage (1: x; 2: x and dy).
inline Layout make_layout(int64_t hidden, size_t x_size, size_t w_size, bool has_weight,
                          bool has_dweight, int operand_rows, int num_stages) {
  Layout l;
  l.weight = 0;
  l.dweight = has_weight ? round128(hidden * int64_t(w_size)) : 0;
  l.stages = l.dweight + (has_dweight ? round128(hidden * 4) : 0);
  l.stage_bytes = round128(hidden * int64_t(x_size)) * operand_rows;
  l.num_stages = num_stages;
  l.total = l.stages + l.stage_bytes * num_stages;
  return l;
}

template <class T, class W>
__device__ __forceinline__ void weight_vec(const unsigned char* smem, const Layout& l,
                                           bool has_weight, int64_t col,
                                           float (&w)[16 / sizeof(T)]) {
  constexpr int VEC = 16 / sizeof(T);
  if (has_weight) {
    load_vec<W, VEC>(reinterpret_cast<const W*>(smem + l.weight) + col, w);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) w[k] = 1.f;
  }
}

// Rows of this block: blockIdx.x, blockIdx.x + gridDim.x, ...; j counts them.
__device__ __forceinline__ int64_t local_rows(int64_t rows) {
  return blockIdx.x < rows ? (rows - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
}

template <class T, class W>
__global__ void __launch_bounds__(kThreads) forward_bulk_kernel(ForwardParams p, Layout l) {
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kMaxStages];
  __shared__ float scratch[kernels::kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden, n = local_rows(p.rows);
  const uint32_t row_bytes = uint32_t(hidden * sizeof(T));
  const Barrier* bar = reinterpret_cast<const Barrier*>(full);
  auto stage = [&](int64_t j) { return smem + l.stages + (j % l.num_stages) * l.stage_bytes; };
  auto issue = [&](int64_t j) {
    const Barrier& b = bar[j % l.num_stages];
    const T* src = static_cast<const T*>(p.x.data) + (blockIdx.x + j * gridDim.x) * p.x.row_stride;
    b.arrive_and_expect_tx(row_bytes);
    cute::SM90_BULK_COPY_G2S::copy(src, reinterpret_cast<uint64_t*>(const_cast<Barrier*>(&b)),
                                   stage(j), row_bytes);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < l.num_stages; ++s) bar[s].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t j = 0; j < n && j < l.num_stages; ++j) issue(j);
  }
  if (p.weight != nullptr)
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
      float w[VEC];
      load_vec<W, VEC>(static_cast<const W*>(p.weight) + c, w);
      store_vec<W, VEC>(reinterpret_cast<W*>(smem + l.weight) + c, w);
    }
  __syncthreads();

  const float inv_hidden = 1.f / float(hidden);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t row = blockIdx.x + j * gridDim.x;
    bar[j % l.num_stages].wait(uint32_t((j / l.num_stages) & 1));
    const T* xs = reinterpret_cast<const T*>(stage(j));
    float sum_sq = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
      float v[VEC];
      load_vec<T, VEC>(xs + c, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum_sq += v[k] * v[k];
    }
    const float rstd = rsqrtf(row_sum(sum_sq, scratch) * inv_hidden + p.eps);
    if (p.rstd != nullptr && threadIdx.x == 0) p.rstd[row] = rstd;
    T* y = static_cast<T*>(p.y.data) + row * p.y.row_stride;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
      float v[VEC], w[VEC];
      load_vec<T, VEC>(xs + c, v);
      weight_vec<T, W>(smem, l, p.weight != nullptr, c, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] *= rstd * w[k];
      store_vec<T, VEC>(y + c, v);
    }
    __syncthreads();  // every thread is done reading this stage: refill it
    if (threadIdx.x == 0 && j + l.num_stages < n) issue(j + l.num_stages);
  }
}

template <class T, class W>
__global__ void __launch_bounds__(kThreads) backward_bulk_kernel(BackwardParams p, Layout l,
                                                                 float* dw_partial) {
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kMaxStages];
  __shared__ float scratch[kernels::kMaxRowsPerBlock][32];
  const int64_t hidden = p.hidden, n = local_rows(p.rows);
  const uint32_t row_bytes = uint32_t(hidden * sizeof(T));
  const int64_t dy_offset = l.stage_bytes / 2;
  const bool has_weight = p.weight != nullptr;
  float* dw_sums = reinterpret_cast<float*>(smem + l.dweight);
  const Barrier* bar = reinterpret_cast<const Barrier*>(full);
  auto stage = [&](int64_t j) { return smem + l.stages + (j % l.num_stages) * l.stage_bytes; };
  auto issue = [&](int64_t j) {
    const Barrier& b = bar[j % l.num_stages];
    auto* mbar = reinterpret_cast<uint64_t*>(const_cast<Barrier*>(&b));
    const int64_t row = blockIdx.x + j * gridDim.x;
    b.arrive_and_expect_tx(2 * row_bytes);
    cute::SM90_BULK_COPY_G2S::copy(static_cast<const T*>(p.x.data) + row * p.x.row_stride, mbar,
                                   stage(j), row_bytes);
    cute::SM90_BULK_COPY_G2S::copy(static_cast<const T*>(p.dy.data) + row * p.dy.row_stride,
                                   mbar, stage(j) + dy_offset, row_bytes);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < l.num_stages; ++s) bar[s].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t j = 0; j < n && j < l.num_stages; ++j) issue(j);
  }
  for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
    float zero[VEC] = {};
    if (has_weight) {
      float w[VEC];
      load_vec<W, VEC>(static_cast<const W*>(p.weight) + c, w);
      store_vec<W, VEC>(reinterpret_cast<W*>(smem + l.weight) + c, w);
      store_vec<float, VEC>(dw_sums + c, zero);
    }
  }
  __syncthreads();

  const float inv_hidden = 1.f / float(hidden);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t row = blockIdx.x + j * gridDim.x;
    bar[j % l.num_stages].wait(uint32_t((j / l.num_stages) & 1));
    const T* xs = reinterpret_cast<const T*>(stage(j));
    const T* dys = reinterpret_cast<const T*>(stage(j) + dy_offset);
    const float rstd = p.rstd[row];
    float dot = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
      float xv[VEC], dyv[VEC], w[VEC];
      load_vec<T, VEC>(xs + c, xv);
      load_vec<T, VEC>(dys + c, dyv);
      weight_vec<T, W>(smem, l, has_weight, c, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) dot += xv[k] * w[k] * dyv[k];
    }
    const float mean_dot = row_sum(dot, scratch) * rstd * inv_hidden;
    T* dx = static_cast<T*>(p.dx.data) + row * p.dx.row_stride;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
      float xv[VEC], dyv[VEC], w[VEC], out[VEC];
      load_vec<T, VEC>(xs + c, xv);
      load_vec<T, VEC>(dys + c, dyv);
      weight_vec<T, W>(smem, l, has_weight, c, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float xhat = xv[k] * rstd;
        out[k] = rstd * (w[k] * dyv[k] - xhat * mean_dot);
        xv[k] = dyv[k] * xhat;  // this row's weight-gradient term
      }
      store_vec<T, VEC>(dx + c, out);
      if (has_weight) {
        float acc[VEC];
        load_vec<float, VEC>(dw_sums + c, acc);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] += xv[k];
        store_vec<float, VEC>(dw_sums + c, acc);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0 && j + l.num_stages < n) issue(j + l.num_stages);
  }

  if (dw_partial == nullptr) return;
  for (int64_t c = int64_t(threadIdx.x) * VEC; c < hidden; c += kThreads * VEC) {
    float acc[VEC];
    load_vec<float, VEC>(dw_sums + c, acc);
    store_vec<float, VEC>(dw_partial + int64_t(blockIdx.x) * hidden + c, acc);
  }
}

}  // namespace tilegrid::rms_norm::sm90
