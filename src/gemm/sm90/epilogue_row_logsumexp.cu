// Fused program: store(bfloat16) > row_partials(logsumexp, 256) (either order) - the product and
// the per-tile row log-sum-exps (a cross-entropy's normaliser over the logits of a language-model
// head).
#include "gemm/sm90/epilogue_row_partials.cuh"

namespace tilegrid::gemm::sm90 {

void run_store_row_logsumexp(const Problem& p, const epilogue::Program& program, int device,
                             Stream stream) {
  programs::run_store_row_partials<programs::LogSumExpOp>(p, program, programs::LseState{}, device,
                                                          stream);
}

}  // namespace tilegrid::gemm::sm90
