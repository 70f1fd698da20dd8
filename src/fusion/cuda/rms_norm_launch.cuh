#pragma once
// Picks the RMSNorm kernel shape for a problem and launches it (internal). Instantiated once
// per (x dtype, weight dtype) pair in its own translation unit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "fusion/cuda/rms_norm_kernels.cuh"
#include "fusion/rms_norm_cuda.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::rms_norm {

struct LaunchShape {
  int items = 1;  // vectors per thread per row held in registers; 0 = streaming
  int threads_per_row = 32;
  int rows_per_block = 1;
};

// Vectors a thread may hold per row. Bounded by registers: the backward holds x, dy, the
// weight and the weight-gradient sums as float32, 4 x 2 x 8 values at most for bf16, which
// stays within the 128 registers that a 512-thread block allows (nvcc -Xptxas -v).
constexpr int max_items(int vec) {
  return vec == 1 ? 8 : vec == 4 ? 4 : 2;
}

// Smallest ITEMS that covers the row with at most `preferred_threads` a row (small blocks,
// several per SM); longer rows get up to 512 threads at max_items; longer still, the
// streaming kernels. bf16 rows stay in registers up to 512 * 2 * 8 = 8192 elements, float32
// up to 512 * 4 * 4 = 8192, unaligned rows (one element per access) up to 512 * 8 = 4096.
// The forward prefers 256 threads (2 x 16 bytes a thread: 6 blocks a SM on the row kernel);
// the backward 512 (1 x 16 bytes, 64 registers, where 2 x 16 bytes took 95 registers and left
// only 512 threads a SM).
inline LaunchShape choose_shape(int64_t hidden, int vec, int preferred_threads) {
  LaunchShape s;
  const int64_t vectors = (hidden + vec - 1) / vec;
  auto round_warp = [](int64_t t) { return int((t + 31) / 32 * 32); };
  for (int items = 1; items <= max_items(vec); items *= 2) {
    const int64_t threads = (vectors + items - 1) / items;
    if (threads <= preferred_threads) {
      s.items = items;
      s.threads_per_row = round_warp(threads);
      s.rows_per_block = std::min(kernels::kMaxRowsPerBlock, std::max(1, 256 / s.threads_per_row));
      return s;
    }
  }
  const int64_t threads = (vectors + max_items(vec) - 1) / max_items(vec);
  if (threads <= kernels::kMaxRegisterThreads) {
    s.items = max_items(vec);
    s.threads_per_row = round_warp(threads);
    return s;
  }
  s.items = 0;
  s.threads_per_row = 512;
  return s;
}

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Persistent grid: as many blocks as fit on the GPU at once, but no more than there is work.
template <class Kernel>
unsigned persistent_blocks(Kernel kernel, int threads, int64_t row_groups, int device) {
  const int per_sm =
      cuda::max_active_blocks(reinterpret_cast<const void*>(kernel), threads, 0, device);
  const int64_t limit = int64_t(std::max(per_sm, 1)) * cuda::multiprocessor_count(device);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(row_groups, limit)));
}

// Register cap by block size; see forward_kernel.
template <class T, class W, int VEC, int ITEMS>
void (*forward_kernel_for(int threads))(ForwardParams) {
  if (threads <= 256) return kernels::forward_kernel<T, W, VEC, ITEMS, 256, 5>;
  return kernels::forward_kernel<T, W, VEC, ITEMS, kernels::kMaxRegisterThreads, 2>;
}

// forward_row_kernel where it applies (16-byte vectors, one row of exactly 256 or 512 threads
// times `items` vectors, a weight), else null. 40 registers either way: 6 blocks of 256 or 3
// of 512 a SM.
template <class T, class W, int VEC>
void (*forward_row_kernel_for(const ForwardParams& p, const LaunchShape& s))(ForwardParams) {
  if constexpr (VEC * sizeof(T) != 16) {
    return nullptr;
  } else {
    const bool exact = p.weight != nullptr && s.rows_per_block == 1 &&
                       p.hidden == int64_t(s.threads_per_row) * s.items * VEC;
    if (!exact) return nullptr;
    if (s.threads_per_row == 256 && s.items == 1)
      return kernels::forward_row_kernel<T, W, 1, 256, 6>;
    if (s.threads_per_row == 256 && s.items == 2)
      return kernels::forward_row_kernel<T, W, 2, 256, 6>;
    if (s.threads_per_row == 512 && s.items == 2)
      return kernels::forward_row_kernel<T, W, 2, 512, 3>;
    return nullptr;
  }
}

template <class T, class W, int VEC>
void launch_forward_vec(const ForwardParams& p, const LaunchShape& s, cudaStream_t stream) {
  const dim3 block(s.threads_per_row, s.rows_per_block);
  const int threads = int(block.x * block.y);
  void (*kernel)(ForwardParams) = forward_row_kernel_for<T, W, VEC>(p, s);
  switch (kernel != nullptr ? -1 : s.items) {
    case -1:
      break;
    case 0:
      kernel = kernels::forward_streaming_kernel<T, W, VEC>;
      break;
    case 1:
      kernel = forward_kernel_for<T, W, VEC, 1>(threads);
      break;
    case 2:
      kernel = forward_kernel_for<T, W, VEC, 2>(threads);
      break;
    case 4:
      if constexpr (max_items(VEC) >= 4) kernel = forward_kernel_for<T, W, VEC, 4>(threads);
      break;
    default:
      if constexpr (max_items(VEC) >= 8) kernel = forward_kernel_for<T, W, VEC, 8>(threads);
      break;
  }
  TG_CHECK(kernel != nullptr, "rms_norm: no forward kernel holds ", s.items, " vectors of ", VEC);
  // One block per row group (the register-resident kernels do not loop over rows).
  const int64_t groups = (p.rows + s.rows_per_block - 1) / s.rows_per_block;
  TG_CHECK(groups <= 0x7fffffff, "rms_norm: at most 2^31 - 1 row groups a call, got ", groups, " (",
           p.rows, " rows)");
  if (groups == 0) return;
  kernel<<<static_cast<unsigned>(groups), block, 0, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH();
}

template <class T, class W, int VEC>
void launch_backward_vec(const BackwardParams& p, const LaunchShape& s, int device,
                         cudaStream_t stream) {
  void (*kernel)(BackwardParams, float*) = nullptr;
  switch (s.items) {
    case 0:
      kernel = kernels::backward_streaming_kernel<T, W, VEC>;
      break;
    case 1:
      kernel = kernels::backward_kernel<T, W, VEC, 1>;
      break;
    case 2:
      kernel = kernels::backward_kernel<T, W, VEC, 2>;
      break;
    case 4:
      if constexpr (max_items(VEC) >= 4) kernel = kernels::backward_kernel<T, W, VEC, 4>;
      break;
    default:
      if constexpr (max_items(VEC) >= 8) kernel = kernels::backward_kernel<T, W, VEC, 8>;
      break;
  }
  TG_CHECK(kernel != nullptr, "rms_norm: no backward kernel holds ", s.items, " vectors of ", VEC);
  const dim3 block(s.threads_per_row, s.rows_per_block);
  const int64_t groups = (p.rows + s.rows_per_block - 1) / s.rows_per_block;
  const unsigned grid =
      p.rows == 0 ? 0 : persistent_blocks(kernel, block.x * block.y, groups, device);

  // One float32 partial row of the weight gradient per (block, row slot); scratch memory
  // comes from the default allocator (PyTorch's caching allocator under Python).
  Tensor partial;
  const int64_t num_partials = p.dweight ? int64_t(grid) * s.rows_per_block : 0;
  if (num_partials > 0) {
    partial = Tensor::empty({num_partials, p.hidden}, DType::Float32, Device::cuda(device),
                            Stream{stream});
    if (s.items == 0)
      TG_CUDA_CHECK(cudaMemsetAsync(partial.data(), 0, partial.numel() * sizeof(float), stream));
  }
  if (grid > 0) {
    kernel<<<grid, block, 0, stream>>>(p, static_cast<float*>(partial.data()));
    TG_CUDA_CHECK_LAUNCH();
  }
  if (p.dweight)
    reduce_weight_partials(static_cast<const float*>(partial.data()), num_partials, p.hidden,
                           p.dweight, p.weight_dtype, Stream{stream});
}

// 16-byte accesses when every row start of every tensor is 16-byte aligned (hidden and the
// row strides multiples of VEC, base pointers aligned); otherwise one element per access.
template <class T, class W>
void forward_launch(const ForwardParams& p, int device, Stream stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = p.hidden % kVec == 0 && p.x.row_stride % kVec == 0 &&
                          p.y.row_stride % kVec == 0 && aligned(p.x.data, 16) &&
                          aligned(p.y.data, 16) &&
                          (p.weight == nullptr || aligned(p.weight, sizeof(W) * kVec));
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (vectorized)
    launch_forward_vec<T, W, kVec>(p, choose_shape(p.hidden, kVec, 256), s);
  else
    launch_forward_vec<T, W, 1>(p, choose_shape(p.hidden, 1, 256), s);
}

template <class T, class W>
void backward_launch(const BackwardParams& p, int device, Stream stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized =
      p.hidden % kVec == 0 && p.x.row_stride % kVec == 0 && p.dy.row_stride % kVec == 0 &&
      p.dx.row_stride % kVec == 0 && aligned(p.x.data, 16) && aligned(p.dy.data, 16) &&
      aligned(p.dx.data, 16) && (p.weight == nullptr || aligned(p.weight, sizeof(W) * kVec));
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (vectorized)
    launch_backward_vec<T, W, kVec>(p, choose_shape(p.hidden, kVec, 512), device, s);
  else
    launch_backward_vec<T, W, 1>(p, choose_shape(p.hidden, 1, 512), device, s);
}

}  // namespace tilegrid::rms_norm
