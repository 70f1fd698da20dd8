// Tuning aid: times the RMSNorm forward kernel of tilegrid in several block shapes and
// register caps on [32768, 4096] bf16. CUDA events around batches of 20 back-to-back
// launches (steady state, as in training; a lone launch on an idle GPU also times its
// ramp-up), median of 10 batches, alternating two input sets of 256 MB so that nothing is
// served from L2. Not part of the library.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        --expt-relaxed-constexpr bench/cuda/rms_norm_forward_shapes.cu -o rms_norm_shapes
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "batch_timing.cuh"
#include "rms_norm_bf16_setup.cuh"

using namespace tilegrid::rms_norm;
using bf16 = __nv_bfloat16;

template <class Kernel>
void time_variant(const char* name, Kernel kernel, int threads, int items,
                  const ForwardParams* base, int64_t bytes) {
  cudaFuncAttributes attr{};
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const float med = time_batches(
      [&](int i) { kernel<<<unsigned(base[i % 2].rows), dim3(threads, 1)>>>(base[i % 2]); });
  std::printf("%-34s threads %4d items %d regs %3d blocks/SM %2d  %.4f ms  %.2f TB/s\n", name,
              threads, items, attr.numRegs, per_sm, med, bytes / (med * 1e-3) / 1e12);
  (void)items;
}

int main() {
  const int64_t rows = 32768, hidden = 4096, n = rows * hidden;
  ForwardParams p[2];
  std::vector<bf16> host(n);
  for (int64_t i = 0; i < n; ++i)
    host[i] = __float2bfloat16(float((i * 2654435761u) % 1000) / 500.f - 1.f);
  bf16* w = nullptr;
  CHECK(cudaMalloc(&w, hidden * sizeof(bf16)));
  CHECK(cudaMemcpy(w, host.data(), hidden * sizeof(bf16), cudaMemcpyHostToDevice));
  for (auto& q : p) q = bf16_forward_problem(host, w, rows, hidden);
  const int64_t bytes = 2 * n * int64_t(sizeof(bf16));
  {  // the ceiling: a device-to-device copy of x into y, same batching
    const float ms = time_batches([&](int i) {
      CHECK(cudaMemcpyAsync(p[i % 2].y.data, p[i % 2].x.data, n * sizeof(bf16),
                            cudaMemcpyDeviceToDevice));
    });
    std::printf("%-34s %.4f ms  %.2f TB/s\n", "copy x -> y (ceiling)", ms,
                bytes / (ms * 1e-3) / 1e12);
  }

  time_variant("2x16B, 256 thr (general kernel)", kernels::forward_kernel<bf16, bf16, 8, 2, 256, 5>,
               256, 2, p, bytes);
  time_variant("2x16B, 256 thr, no register cap", kernels::forward_kernel<bf16, bf16, 8, 2, 512, 1>,
               256, 2, p, bytes);
  time_variant("2x16B, 256 thr, >=6 blocks/SM", kernels::forward_kernel<bf16, bf16, 8, 2, 256, 6>,
               256, 2, p, bytes);
  time_variant("1x16B, 512 thr", kernels::forward_kernel<bf16, bf16, 8, 1, 512, 3>, 512, 1, p,
               bytes);
  time_variant("1x16B, 512 thr, >=4 blocks/SM", kernels::forward_kernel<bf16, bf16, 8, 1, 512, 4>,
               512, 1, p, bytes);
  time_variant("4x16B, 128 thr", kernels::forward_kernel<bf16, bf16, 8, 4, 128, 1>, 128, 4, p,
               bytes);
  ForwardParams no_weight[2] = {p[0], p[1]};
  no_weight[0].weight = no_weight[1].weight = nullptr;
  time_variant("2x16B, 256 thr, without weight", kernels::forward_kernel<bf16, bf16, 8, 2, 256, 6>,
               256, 2, no_weight, bytes);
  return 0;
}
