// Portable matmul for CUDA GPUs without the sm_90a kernels. Correctness over speed: a classic
// shared-memory tiled kernel (64x64 output tile a block, K in steps of 16, 4x4 outputs a
// thread, float32 accumulation) that reads a and b through general strides, so one kernel
// serves every layout. It reaches a few percent of an H100's tensor-core rate; it exists so
// that every CUDA GPU gets a correct answer, not to be fast.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "core/cuda_convert.cuh"
#include "gemm/gemm_cuda.h"

namespace tilegrid::gemm {
namespace {

constexpr int kTile = 64;      // output rows and columns a block
constexpr int kStepK = 16;     // K a shared-memory stage
constexpr int kThreads = 256;  // 16 x 16 threads, 4 x 4 outputs each
constexpr int kPerThread = kTile / 16;

struct PortableParams {
  int64_t m, n, k;
  const void* a;
  const void* b;
  void* out;
  int64_t a_stride_m, a_stride_k, b_stride_k, b_stride_n, ldo;
};

using cuda_convert::from_float;
using cuda_convert::to_float;

// Blocks tile M along x (up to 2^31 - 1 of them) and loop over N tiles along y.
template <class T, class TOut>
__global__ void __launch_bounds__(kThreads) portable_kernel(PortableParams p) {
  // +4 floats a row: rows of 68 floats spread the 4-wide column reads over the banks.
  __shared__ float as[kStepK][kTile + 4];
  __shared__ float bs[kStepK][kTile + 4];
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = int64_t(blockIdx.x) * kTile;

  for (int64_t n0 = int64_t(blockIdx.y) * kTile; n0 < p.n; n0 += int64_t(gridDim.y) * kTile) {
    float acc[kPerThread][kPerThread] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += kStepK) {
      // Each thread stages 4 elements of a's and of b's tile, zeros past the edges.
      for (int i = threadIdx.x; i < kTile * kStepK; i += kThreads) {
        const int r = i / kStepK, kk = i % kStepK;
        const int64_t gm = m0 + r, gk = k0 + kk;
        as[kk][r] = gm < p.m && gk < p.k ? to_float(a[gm * p.a_stride_m + gk * p.a_stride_k]) : 0.f;
        const int c = i % kTile, kb = i / kTile;
        const int64_t gn = n0 + c, gkb = k0 + kb;
        bs[kb][c] =
            gn < p.n && gkb < p.k ? to_float(b[gkb * p.b_stride_k + gn * p.b_stride_n]) : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kStepK; ++kk) {
        float av[kPerThread], bv[kPerThread];
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          av[i] = as[kk][ty * kPerThread + i];
          bv[i] = bs[kk][tx * kPerThread + i];
        }
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
#pragma unroll
          for (int j = 0; j < kPerThread; ++j) acc[i][j] += av[i] * bv[j];
      }
      __syncthreads();
    }
    TOut* out = static_cast<TOut*>(p.out);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t gm = m0 + ty * kPerThread + i;
      if (gm >= p.m) continue;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int64_t gn = n0 + tx * kPerThread + j;
        if (gn < p.n) out[gm * p.ldo + gn] = from_float<TOut>(acc[i][j]);
      }
    }
  }
}

template <class T, class TOut>
void launch(const PortableParams& params, cudaStream_t stream) {
  const int64_t m_tiles = (params.m + kTile - 1) / kTile;
  const int64_t n_tiles = (params.n + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(m_tiles),
                  static_cast<unsigned>(std::min<int64_t>(n_tiles, 65535)));
  portable_kernel<T, TOut><<<grid, kThreads, 0, stream>>>(params);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void matmul_portable(const Problem& p, int device, Stream stream) {
  const PortableParams params{p.m,
                              p.n,
                              p.k,
                              p.a,
                              p.b,
                              p.out,
                              p.a_stride_m(),
                              p.a_stride_k(),
                              p.b_stride_k(),
                              p.b_stride_n(),
                              p.ldo};
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  const bool f32_out = p.out_dtype == DType::Float32;
  if (p.dtype == DType::BFloat16) {
    if (f32_out)
      launch<__nv_bfloat16, float>(params, s);
    else
      launch<__nv_bfloat16, __nv_bfloat16>(params, s);
  } else {
    if (f32_out)
      launch<__half, float>(params, s);
    else
      launch<__half, __half>(params, s);
  }
}

}  // namespace tilegrid::gemm
