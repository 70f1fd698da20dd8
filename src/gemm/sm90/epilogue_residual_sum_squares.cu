// Fused program: tile(add, bfloat16) > store(bfloat16) > row_partials(sum_squares, 256) - the
// residual add after an attention or MLP output projection, with the per-tile row sums of
// squares of the new residual stream that the next RMSNorm needs (finish_row_partials turns
// them into the full rows' sums).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {

void run_residual_sum_squares(const Problem& p, const epilogue::Program& program, int device,
                              Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<ResidualSumSquares>;
  const TensorView& residual = std::get<epilogue::Tile>(program.steps[0]).values;
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const TensorView& partials = std::get<epilogue::RowPartials>(program.steps[2]).partials;
  auto make_args = [&](float* buffer) {
    return typename Gemm::Callbacks::Arguments{
        {      // row partials
         {     // acc + residual
          {},  // acc
          {residual.data_ptr<const cutlass::bfloat16_t>(), cutlass::bfloat16_t(0),
           matrix_stride(tma_row_stride(residual))},  // residual(i, j)
          {}},
         {buffer, 0.0f, {}}},
        {}};  // round to D's type
  };
  launch_with_row_partials<Gemm>(p, out, partials, make_args, device, stream);
}

}  // namespace tilegrid::gemm::sm90
