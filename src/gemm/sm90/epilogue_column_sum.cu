// Fused program: store(bfloat16) > column_sum (or column_sum > store(bfloat16)) - the
// product and its column sums over M in one pass, plus a small finishing kernel.
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {

void run_store_column_sum(const Problem& p, const epilogue::Program& program, int device,
                          Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<StoreColumnSum>;
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
