// Picks the CUDA matmul kernel: the sm_90a kernels where they run (hopper_kernels_run_on:
// compute capability 9.0 and a build with the CUTLASS headers), the portable kernel otherwise.
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "gemm/gemm_cuda.h"
#include "tilegrid/core/kernel_choice.h"
#ifdef TILEGRID_WITH_SM90_GEMM
#include "gemm/sm90/gemm_sm90.h"
#endif

namespace tilegrid::gemm {
namespace {

enum class Choice : uint8_t { Sm90Cooperative, Sm90Pingpong, Portable };

// Cooperative 128x256 tiles unless there are fewer of them than SMs; then ping-pong's
// 128x128 tiles, twice as many, occupy more of the GPU (8192 x 4096 -> 1024 tiles of 128x256,
// far above the H200's 132 SMs; 512 x 4096 -> 64, where 128 smaller tiles do better).
Choice choose_sm90(const Problem& p, int device) {
  const int64_t tiles = (p.m + 127) / 128 * ((p.n + 255) / 256);
  return tiles >= cuda::multiprocessor_count(device) ? Choice::Sm90Cooperative
                                                     : Choice::Sm90Pingpong;
}

// A forced sm90 kernel on a build or a device without it is an error, not a fallback.
void check_sm90_runs(int device) {
  if (hopper_kernels_run_on(KernelFamily::Gemm, device)) return;
  TG_CHECK(hopper_kernels_built(KernelFamily::Gemm),
           "matmul: this build of tilegrid has no sm90 kernels (the CUTLASS headers were not "
           "found when it was configured)");
  const int cc = cuda::compute_capability(device);
  throw ValueError(
      detail::concat("matmul: the sm90 kernels need a compute capability 9.0 GPU, cuda:", device,
                     " has ", cc / 10, ".", cc % 10));
}

// The per-call kernel, else (kernel=Auto) the gemm request: auto takes the Hopper kernels
// where they run.
Choice choose(const Problem& p, MatmulKernel kernel, int device) {
  switch (kernel) {
    case MatmulKernel::Portable:
      return Choice::Portable;
    case MatmulKernel::Sm90Cooperative:
    case MatmulKernel::Sm90Pingpong:
      check_sm90_runs(device);
      return kernel == MatmulKernel::Sm90Cooperative ? Choice::Sm90Cooperative
                                                     : Choice::Sm90Pingpong;
    case MatmulKernel::Auto:
      break;
  }
  switch (requested_kernel(KernelFamily::Gemm)) {
    case KernelPath::Portable:
      return Choice::Portable;
    case KernelPath::Hopper:
      check_sm90_runs(device);
      return choose_sm90(p, device);
    default:
      return hopper_kernels_run_on(KernelFamily::Gemm, device) ? choose_sm90(p, device)
                                                               : Choice::Portable;
  }
}

#ifdef TILEGRID_WITH_SM90_GEMM
void run_sm90(const Problem& p, sm90::Schedule schedule, int device, Stream stream) {
  const bool bf16 = p.dtype == DType::BFloat16;
  switch (p.layout) {
    case Layout::Fprop:
      return bf16 ? sm90::run_bf16_fprop(p, schedule, device, stream)
                  : sm90::run_f16_fprop(p, schedule, device, stream);
    case Layout::Dgrad:
      return bf16 ? sm90::run_bf16_dgrad(p, schedule, device, stream)
                  : sm90::run_f16_dgrad(p, schedule, device, stream);
    case Layout::Wgrad:
      return bf16 ? sm90::run_bf16_wgrad(p, schedule, device, stream)
                  : sm90::run_f16_wgrad(p, schedule, device, stream);
  }
}
#endif

}  // namespace

void matmul_cuda(const Problem& p, MatmulKernel kernel, int device, Stream stream) {
  const Choice choice = choose(p, kernel, device);
  if (p.k == 0) {  // an empty sum: zeros, whatever the kernel
    CudaDeviceGuard guard(device);
    const size_t item = itemsize(p.out_dtype);
    TG_CUDA_CHECK(cudaMemset2DAsync(p.out, p.ldo * item, 0, p.n * item, p.m,
                                    static_cast<cudaStream_t>(stream.handle)));
    return;
  }
  switch (choice) {
    case Choice::Portable:
      return matmul_portable(p, device, stream);
#ifdef TILEGRID_WITH_SM90_GEMM
    case Choice::Sm90Cooperative:
      return run_sm90(p, sm90::Schedule::Cooperative, device, stream);
    case Choice::Sm90Pingpong:
      return run_sm90(p, sm90::Schedule::Pingpong, device, stream);
#endif
    default:
      throw Error("matmul: no kernel for this choice");  // unreachable: choose() checked
  }
}

std::string describe_cuda(const Problem& p, MatmulKernel kernel, int device) {
  switch (choose(p, kernel, device)) {
    case Choice::Sm90Cooperative:
      return "sm90 cooperative 128x256x64 cluster 2x1";
    case Choice::Sm90Pingpong:
      return "sm90 ping-pong 128x128x64 cluster 2x1";
    case Choice::Portable:
      break;
  }
  if (kernel == MatmulKernel::Portable) return "portable CUDA (untuned)";
  if (requested_kernel(KernelFamily::Gemm) == KernelPath::Portable)
    return "portable CUDA (untuned; the gemm kernel choice is portable)";
  return hopper_kernels_built(KernelFamily::Gemm)
             ? "portable CUDA (untuned; the GPU is not compute capability 9.0)"
             : "portable CUDA (untuned; this build has no sm90 kernels)";
}

}  // namespace tilegrid::gemm
