// Fused program: store(T) > column_sum (either order) - the product and its sums along M, one
// float32 per column (a bias or norm-weight gradient), plus a small finishing kernel.
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

// The row reduction node (in CUTLASS's naming: it reduces into a row vector) adds the float32
// values in registers and across threads, and writes one partial row per M tile;
// sum_column_partials adds those. Not the node's own final reduction: there the CTA that
// finishes a column tile last reads the other tiles' partials one dependent volatile load at
// a time (64 at M = 8192), and the program took 1.11x the plain product's time
// (bench/results/2026-11-30_h200_gemm_epilogue_rope_column_sum.json).
struct StoreColumnSum {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float, kRound>,
      fusion::Sm90EVT<
          fusion::Sm90RowReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0,
                                   typename Descriptor::TileShape, float, float, kRound,
                                   ColumnVectorStride, 4, true, /*FinalReduction=*/false>,
          fusion::Sm90AccFetch>>;
};

}  // namespace programs

template <DType E>
void run_store_column_sum(const Problem& p, const epilogue::Program& program, int device,
                          Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<ElementOf<E>, StoreColumnSum>;
  const TensorView* out = nullptr;
  const TensorView* sums = nullptr;
  for (const epilogue::Step& step : program.steps) {
    if (const auto* s = std::get_if<epilogue::Store>(&step)) out = &s->out;
    if (const auto* s = std::get_if<epilogue::ColumnSum>(&step)) sums = &s->out;
  }
  // Arguments nest as the tree does: each node's children first, then its own.
  auto make_args = [](float* partials) {
    return
        typename Gemm::Callbacks::Arguments{{{},                     // acc
                                             {partials, 0.0f, {}}},  // partials[t][j] (identity 0)
                                            {}};                     // identity
  };
  launch_with_column_sums<Gemm>(p, *out, *sums, make_args, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_store_column_sum)
TG_FUSED_PROGRAM(run_store_column_sum, Fprop, "store(T) > column_sum")
TG_FUSED_PROGRAM(run_store_column_sum, Fprop, "column_sum > store(T)")
