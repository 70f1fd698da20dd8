// Fused program: tile(add, T) > store(T) > row_partials(sum_squares, 256) - the residual add
// after an attention or MLP output projection, h = acc + residual (TMA-loaded), with the
// per-tile row sums of squares of h that the next RMSNorm needs (finish_row_partials turns
// them into the full rows' sums).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

// The column reduction node (non-final) writes one float32 per (row, N tile) into an M-major
// [ceil(N / 256), round_up(M, 128)] buffer, which transpose_row_partials turns into the
// program's [M, ceil(N / 256)] layout. The reduction sees the float32 sum and the rounding to
// T comes last (the root's output is what the collective stores, in D's type).
template <class Element>
struct ResidualSumSquares {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      RoundToD<ElementD>,
      fusion::Sm90EVT<
          fusion::Sm90ColReduction<SumSquaresOp, cutlass::plus, cutlass::plus, 0,
                                   typename Descriptor::TileShape, float, float, kRound,
                                   RowVectorStride, 4, true, /*FinalReduction=*/false>,
          fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,
                          fusion::Sm90AccFetch, AuxLoad<Descriptor, Element>>>>;
};

}  // namespace programs

template <DType E>
void run_residual_sum_squares(const Problem& p, const epilogue::Program& program, int device,
                              Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  using Gemm = FusedGemm<Element, ResidualSumSquares<Element>>;
  const TensorView& residual = std::get<epilogue::Tile>(program.steps[0]).values;
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const TensorView& partials = std::get<epilogue::RowPartials>(program.steps[2]).partials;
  auto make_args = [&](float* buffer) {
    return typename Gemm::Callbacks::Arguments{
        {      // row partials
         {     // acc + residual
          {},  // acc
          {residual.data_ptr<const Element>(), Element(0),
           matrix_stride(tma_row_stride(residual))},  // residual(i, j)
          {}},
         {buffer, 0.0f, {}}},
        {}};  // round to D's type
  };
  launch_with_row_partials<Gemm>(p, out, partials, make_args, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_residual_sum_squares)
// clang-format off
TG_FUSED_PROGRAM(run_residual_sum_squares, Fprop, "tile(add, T) > store(T) > row_partials(sum_squares, 256)")
// clang-format on
