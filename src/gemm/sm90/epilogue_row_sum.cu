// Fused program: store(bfloat16) > row_partials(sum, 256) (either order) - the product and
// the per-tile row sums (e.g. a mean's numerator).
#include "gemm/sm90/epilogue_row_partials.cuh"

namespace tilegrid::gemm::sm90 {

void run_store_row_sum(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  programs::run_store_row_partials<programs::SumOp>(p, program, 0.0f, device, stream);
}

}  // namespace tilegrid::gemm::sm90
