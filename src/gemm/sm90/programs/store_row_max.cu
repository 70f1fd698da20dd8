// Fused program: store(T) > row_partials(max, 256) (either order) - the product and
// the per-tile row maxima.
#include "gemm/sm90/epilogue_row_partials.cuh"

namespace tilegrid::gemm::sm90 {

template <DType E>
void run_store_row_max(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  using programs::ElementOf;
  programs::run_store_row_partials<ElementOf<E>, programs::MaxOp>(p, program, -INFINITY, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_store_row_max)
TG_FUSED_PROGRAM(run_store_row_max, Fprop, "store(T) > row_partials(max, 256)")
TG_FUSED_PROGRAM(run_store_row_max, Fprop, "row_partials(max, 256) > store(T)")
