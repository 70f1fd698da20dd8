// Fused program: store(T) > row_partials(logsumexp, 256) (either order) - the product and
// the per-tile row log-sum-exps (a cross-entropy's normaliser over the logits
// of a language-model head).
#include "gemm/sm90/epilogue_row_partials.cuh"

namespace tilegrid::gemm::sm90 {

template <DType E>
void run_store_row_logsumexp(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  using programs::ElementOf;
  programs::run_store_row_partials<ElementOf<E>, programs::LogSumExpOp>(
      p, program, programs::LseState{}, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_store_row_logsumexp)
TG_FUSED_PROGRAM(run_store_row_logsumexp, Fprop, "store(T) > row_partials(logsumexp, 256)")
TG_FUSED_PROGRAM(run_store_row_logsumexp, Fprop, "row_partials(logsumexp, 256) > store(T)")
