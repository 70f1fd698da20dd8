// sm_90a GEMM kernels for f16 inputs, y = x * w^T: a and b K-contiguous
// (four kernels: f16 and float32 output, cooperative and ping-pong).
#include "gemm/sm90/epilogue_store.cuh"
#include "gemm/sm90/gemm_sm90_kernel.cuh"

namespace tilegrid::gemm::sm90 {

void run_f16_fprop(const Problem& p, Schedule schedule, int device, Stream stream) {
  run_layout<cutlass::half_t, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,
             StoreAccumulator>(p, schedule, device, stream);
}

}  // namespace tilegrid::gemm::sm90
