// Tuning aid: the library's RMSNorm forward kernels (the row kernel and the general one)
// against lean variants on [32768, 4096] bf16 (one row per block, x and the weight kept packed
// as bf16 in registers, 32-bit column offsets, no row loop), with and without streaming cache
// hints (x read and y written with evict-first); this found what separated the library's
// kernel (86.5% of copy) from Liger-Kernel's Triton kernel (96.6%): registers. Same timing
// as rms_norm_forward_shapes.cu: CUDA events around batches of 20 back-to-back launches,
// median of 10 batches, two 256 MB input sets alternating. Not part of the library.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        --expt-relaxed-constexpr bench/cuda/rms_norm_forward_lean.cu -o rms_norm_lean
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "batch_timing.cuh"
#include "rms_norm_bf16_setup.cuh"
#include "fusion/cuda/rms_norm_kernels.cuh"

using namespace tilegrid::rms_norm;
using bf16 = __nv_bfloat16;

struct Lean {
  const bf16* x;
  const bf16* w;
  bf16* y;
  float* rstd;
  int hidden;
  float eps;
};

template <bool HINTS>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (HINTS) return __ldcs(p);
  return *p;
}
template <bool HINTS>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (HINTS)
    __stcs(p, v);
  else
    *p = v;
}

__device__ __forceinline__ float2 unpack(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}
__device__ __forceinline__ uint32_t pack(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

// One row per block of THREADS threads, ITEMS 16-byte vectors a thread (hidden = THREADS *
// ITEMS * 8 exactly; a tuning aid, not general).
template <int THREADS, int ITEMS, int MIN_BLOCKS, bool HINTS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) lean_forward(Lean p) {
  __shared__ float warp_sums[THREADS / 32];
  const uint4* xr = reinterpret_cast<const uint4*>(p.x + size_t(blockIdx.x) * p.hidden);
  const uint4* wr = reinterpret_cast<const uint4*>(p.w);
  uint4 xv[ITEMS], wv[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) xv[i] = load16<HINTS>(xr + i * THREADS + threadIdx.x);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) wv[i] = __ldg(wr + i * THREADS + threadIdx.x);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(&xv[i]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = unpack(u[k]);
      ss += f.x * f.x + f.y * f.y;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  ss = 0.f;
#pragma unroll
  for (int k = 0; k < THREADS / 32; ++k) ss += warp_sums[k];
  const float r = rsqrtf(ss / float(p.hidden) + p.eps);
  if (threadIdx.x == 0) p.rstd[blockIdx.x] = r;
  uint4* yr = reinterpret_cast<uint4*>(p.y + size_t(blockIdx.x) * p.hidden);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(&xv[i]);
    const uint32_t* q = reinterpret_cast<const uint32_t*>(&wv[i]);
    uint4 out;
    uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = unpack(u[k]), g = unpack(q[k]);
      o[k] = pack(f.x * r * g.x, f.y * r * g.y);
    }
    store16<HINTS>(yr + i * THREADS + threadIdx.x, out);
  }
}

template <class Kernel>
void report(const char* name, Kernel kernel, int threads, float ms, int64_t bytes, float copy_ms) {
  cudaFuncAttributes attr{};
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  std::printf("%-40s regs %3d blocks/SM %2d  %.4f ms  %.2f TB/s  %.1f%% of copy\n", name,
              attr.numRegs, per_sm, ms, bytes / (ms * 1e-3) / 1e12, 100.f * copy_ms / ms);
}

template <int THREADS, int ITEMS, int MIN_BLOCKS, bool HINTS>
void run_lean(const char* name, const Lean* p, int64_t rows, int64_t bytes, float copy_ms,
              const bf16* want) {
  auto kernel = lean_forward<THREADS, ITEMS, MIN_BLOCKS, HINTS>;
  const float ms = time_batches([&](int i) { kernel<<<unsigned(rows), THREADS>>>(p[i % 2]); });
  report(name, kernel, THREADS, ms, bytes, copy_ms);
  // How many elements differ from the library kernel's (the lean kernels round x * rstd * w
  // in another order).
  const int64_t n = rows * p[0].hidden;
  const int64_t differ = count_differing(p[0].y, want, n);
  std::printf("%-40s %lld of %lld elements differ from the library kernel's\n", "",
              static_cast<long long>(differ), static_cast<long long>(n));
}

int main() {
  const int64_t rows = 32768, hidden = 4096, n = rows * hidden;
  ForwardParams p[2];
  Lean lean[2];
  std::vector<bf16> host(n);
  for (int64_t i = 0; i < n; ++i)
    host[i] = __float2bfloat16(float((i * 2654435761u) % 1000) / 500.f - 1.f);
  bf16* w = nullptr;
  CHECK(cudaMalloc(&w, hidden * sizeof(bf16)));
  CHECK(cudaMemcpy(w, host.data() + 7, hidden * sizeof(bf16), cudaMemcpyHostToDevice));
  bf16* reference = nullptr;
  CHECK(cudaMalloc(&reference, n * sizeof(bf16)));
  for (int s = 0; s < 2; ++s) {
    p[s] = bf16_forward_problem(host, w, rows, hidden);
    lean[s] = {static_cast<const bf16*>(p[s].x.data), w, static_cast<bf16*>(p[s].y.data), p[s].rstd,
               int(hidden), p[s].eps};
  }
  const int64_t bytes = 2 * n * int64_t(sizeof(bf16));
  const float copy_ms = time_batches([&](int i) {
    CHECK(cudaMemcpyAsync(p[i % 2].y.data, p[i % 2].x.data, n * sizeof(bf16),
                          cudaMemcpyDeviceToDevice));
  });
  std::printf("%-40s %.4f ms  %.2f TB/s\n", "copy x -> y (ceiling)", copy_ms,
              bytes / (copy_ms * 1e-3) / 1e12);

  auto library = kernels::forward_row_kernel<bf16, bf16, 2, 256, 6>;
  const float lib_ms =
      time_batches([&](int i) { library<<<unsigned(rows), dim3(256, 1)>>>(p[i % 2]); });
  report("library row kernel 2x16B, 256 thr", library, 256, lib_ms, bytes, copy_ms);
  CHECK(cudaMemcpy(reference, p[0].y.data, n * sizeof(bf16), cudaMemcpyDeviceToDevice));
  auto general = kernels::forward_kernel<bf16, bf16, 8, 2, 256, 5>;
  const float general_ms =
      time_batches([&](int i) { general<<<unsigned(rows), dim3(256, 1)>>>(p[i % 2]); });
  report("library general kernel 2x16B, 256 thr", general, 256, general_ms, bytes, copy_ms);
  std::printf("%-40s %lld elements differ from the row kernel's\n", "",
              static_cast<long long>(count_differing(static_cast<const bf16*>(p[0].y.data),
                                                     reference, n)));

  run_lean<256, 2, 1, false>("lean 2x16B 256 thr", lean, rows, bytes, copy_ms, reference);
  run_lean<256, 2, 1, true>("lean 2x16B 256 thr, streaming hints", lean, rows, bytes, copy_ms,
                            reference);
  run_lean<256, 2, 6, false>("lean 2x16B 256 thr, >=6 blocks/SM", lean, rows, bytes, copy_ms,
                             reference);
  run_lean<256, 2, 6, true>("lean 2x16B 256 thr, >=6, hints", lean, rows, bytes, copy_ms,
                            reference);
  run_lean<256, 2, 8, true>("lean 2x16B 256 thr, >=8, hints", lean, rows, bytes, copy_ms,
                            reference);
  run_lean<512, 1, 4, false>("lean 1x16B 512 thr, >=4 blocks/SM", lean, rows, bytes, copy_ms,
                             reference);
  run_lean<512, 1, 4, true>("lean 1x16B 512 thr, >=4, hints", lean, rows, bytes, copy_ms,
                            reference);
  run_lean<128, 4, 1, true>("lean 4x16B 128 thr, hints", lean, rows, bytes, copy_ms, reference);
  run_lean<128, 4, 12, true>("lean 4x16B 128 thr, >=12, hints", lean, rows, bytes, copy_ms,
                             reference);
  run_lean<64, 8, 16, true>("lean 8x16B 64 thr, >=16, hints", lean, rows, bytes, copy_ms,
                            reference);

  // [16384, 8192]: the library's 512-thread row kernel (2 x 16 bytes a thread) at three register
  // caps, on the same bytes.
  for (auto& q : p) {
    q.rows = rows / 2;
    q.hidden = hidden * 2;
    q.x.row_stride = q.y.row_stride = hidden * 2;
  }
  bf16* wide_weight = nullptr;
  CHECK(cudaMalloc(&wide_weight, 2 * hidden * sizeof(bf16)));
  CHECK(
      cudaMemcpy(wide_weight, host.data() + 7, 2 * hidden * sizeof(bf16), cudaMemcpyHostToDevice));
  p[0].weight = p[1].weight = wide_weight;
  std::printf("[16384, 8192]\n");
  auto wide2 = kernels::forward_row_kernel<bf16, bf16, 2, 512, 2>;
  auto wide3 = kernels::forward_row_kernel<bf16, bf16, 2, 512, 3>;
  auto wide4 = kernels::forward_row_kernel<bf16, bf16, 2, 512, 4>;
  report("library 2x16B, 512 thr, >=2 blocks/SM", wide2, 512,
         time_batches([&](int i) { wide2<<<unsigned(rows / 2), dim3(512, 1)>>>(p[i % 2]); }), bytes,
         copy_ms);
  report("library 2x16B, 512 thr, >=3 blocks/SM", wide3, 512,
         time_batches([&](int i) { wide3<<<unsigned(rows / 2), dim3(512, 1)>>>(p[i % 2]); }), bytes,
         copy_ms);
  report("library 2x16B, 512 thr, >=4 blocks/SM", wide4, 512,
         time_batches([&](int i) { wide4<<<unsigned(rows / 2), dim3(512, 1)>>>(p[i % 2]); }), bytes,
         copy_ms);
  return 0;
}
