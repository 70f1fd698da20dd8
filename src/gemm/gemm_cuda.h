#pragma once
// CUDA back end of matmul (internal); launches on `stream` of `device`.
#include <string>

#include "gemm/gemm_problem.h"
#include "tilegrid/core/device.h"
#include "tilegrid/gemm/gemm.h"

namespace tilegrid::gemm {

// Picks the kernel (sm_90a on compute capability 9.0, else the portable one) and runs it.
void matmul_cuda(const Problem& p, MatmulKernel kernel, int device, Stream stream);

// The kernel matmul_cuda would run, in words; raises the error matmul_cuda would raise for a
// kernel the device cannot run.
std::string describe_cuda(const Problem& p, MatmulKernel kernel, int device);

// Portable kernel for any CUDA GPU (cuda/gemm_portable.cu).
void matmul_portable(const Problem& p, int device, Stream stream);

}  // namespace tilegrid::gemm
