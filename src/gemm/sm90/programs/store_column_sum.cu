// Fused program: store(T) > column_sum (either order) - the product and its sums along M, one
// float32 per column (a bias or norm-weight gradient), plus a small finishing kernel.
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

struct StoreColumnSum {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      RoundToD<ElementD>, fusion::Sm90EVT<ColumnSumPartials<Descriptor>, fusion::Sm90AccFetch>>;
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
