// Fused program: store(T) > row_partials(sum, 256) (either order) - the product and
// the per-tile row sums (e.g. a mean's numerator).
#include "gemm/sm90/epilogue_row_partials.cuh"

namespace tilegrid::gemm::sm90 {

template <DType E>
void run_store_row_sum(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  using programs::ElementOf;
  programs::run_store_row_partials<ElementOf<E>, programs::SumOp>(p, program, 0.0f, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_store_row_sum)
TG_FUSED_PROGRAM(run_store_row_sum, Fprop, "store(T) > row_partials(sum, 256)")
TG_FUSED_PROGRAM(run_store_row_sum, Fprop, "row_partials(sum, 256) > store(T)")
