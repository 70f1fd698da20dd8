// Fused program: store(bfloat16) > row_partials(max, 256) (either order) - the product and
// the per-tile row maxima.
#include "gemm/sm90/epilogue_row_partials.cuh"

namespace tilegrid::gemm::sm90 {

void run_store_row_max(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  programs::run_store_row_partials<programs::MaxOp>(p, program, -INFINITY, device, stream);
}

}  // namespace tilegrid::gemm::sm90
