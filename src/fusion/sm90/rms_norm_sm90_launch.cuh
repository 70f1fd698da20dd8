#pragma once
// Host side of the Hopper RMSNorm kernels: eligibility, shared-memory layout, grid (internal).
#include "core/cuda_check.h"
#include "fusion/cuda/rms_norm_launch.cuh"
#include "fusion/sm90/rms_norm_bulk.cuh"
#include "fusion/sm90/rms_norm_sm90.h"
#include "tilegrid/core/backends.h"

namespace tilegrid::rms_norm::sm90 {

// Below 2 KB a row (1024 bf16) the per-row barrier and the single copy do not pay for
// themselves; the register kernels handle such rows at full speed anyway (many rows a block).
constexpr int64_t kMinRowBytes = 2048;
// Leave room for the static shared memory and one more block's worth of headroom.
constexpr int64_t kMaxDynamicSmem = 200 * 1024;

inline bool is_hopper(int device) {
  return hopper_kernels_enabled() && cuda::compute_capability_major(device) == 9;
}

// The deepest pipeline (up to `want` stages, at least 2) whose layout fits.
inline bool fit_layout(int64_t hidden, size_t x_size, size_t w_size, bool has_weight,
                       bool has_dweight, int operand_rows, int want, Layout& out) {
  for (int stages = want; stages >= 2; --stages) {
    out = make_layout(hidden, x_size, w_size, has_weight, has_dweight, operand_rows, stages);
    if (out.total <= kMaxDynamicSmem) return true;
  }
  return false;
}

template <class Kernel>
unsigned resident_grid(Kernel kernel, const Layout& l, int64_t rows, int device) {
  cuda::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), size_t(l.total), device);
  return persistent_blocks(kernel, kThreads, rows, device, size_t(l.total));
}

template <class T, class W>
bool try_forward(const ForwardParams& p, int device, Stream stream) {
  if (p.rows == 0 || p.hidden * int64_t(sizeof(T)) < kMinRowBytes || !is_hopper(device))
    return false;
  Layout l;
  // 4 stages: 4 rows in flight a block, with 3-5 blocks a SM for 4096-8192 wide bf16 rows.
  if (!fit_layout(p.hidden, sizeof(T), sizeof(W), p.weight != nullptr, false, 1, 4, l))
    return false;
  CudaDeviceGuard guard(device);
  auto kernel = forward_bulk_kernel<T, W>;
  const unsigned grid = resident_grid(kernel, l, p.rows, device);
  kernel<<<grid, kThreads, size_t(l.total), static_cast<cudaStream_t>(stream.handle)>>>(p, l);
  TG_CUDA_CHECK_LAUNCH();
  return true;
}

template <class T, class W>
bool try_backward(const BackwardParams& p, int device, Stream stream) {
  if (p.rows == 0 || p.hidden * int64_t(sizeof(T)) < kMinRowBytes || !is_hopper(device))
    return false;
  Layout l;
  const bool has_weight = p.weight != nullptr;
  // 3 stages of x and dy: 48 KB a block for 4096-wide bf16 rows, 3 blocks a SM.
  if (!fit_layout(p.hidden, sizeof(T), sizeof(W), has_weight, has_weight, 2, 3, l)) return false;
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  auto kernel = backward_bulk_kernel<T, W>;
  const unsigned grid = resident_grid(kernel, l, p.rows, device);
  Tensor partial;
  if (has_weight)
    partial = Tensor::empty({int64_t(grid), p.hidden}, DType::Float32, Device::cuda(device),
                            stream);
  kernel<<<grid, kThreads, size_t(l.total), s>>>(p, l, static_cast<float*>(partial.data()));
  TG_CUDA_CHECK_LAUNCH();
  if (has_weight)
    reduce_weight_partials(static_cast<const float*>(partial.data()), int64_t(grid), p.hidden,
                           p.dweight, p.weight_dtype, stream);
  return true;
}

}  // namespace tilegrid::rms_norm::sm90
