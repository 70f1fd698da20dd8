// sm_90a GEMM kernels for f16 inputs, dw = dy^T * x: a M-contiguous, b N-contiguous
// (four kernels: f16 and float32 output, cooperative and ping-pong).
#include "gemm/sm90/epilogue_store.cuh"
#include "gemm/sm90/gemm_sm90_kernel.cuh"

namespace tilegrid::gemm::sm90 {

void run_f16_wgrad(const Problem& p, Schedule schedule, int device, Stream stream) {
  run_layout<cutlass::half_t, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor,
             StoreAccumulator>(p, schedule, device, stream);
}

}  // namespace tilegrid::gemm::sm90
