// Fused program: elementwise_grad(gelu_tanh, T) > store(T) > column_sum (or column_sum >
// store(T)), in the data-gradient layout - the backward of a linear layer's bias + GELU
// (bias_gelu_aux.cu) fused into the next layer's data gradient: d(pre) = (dy * w) *
// gelu'(pre) with the saved pre-activation TMA-loaded, stored, and its sums over M, the bias
// gradient (a column reduction after another step).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

// v * f'(x) per element (x the pre-activation, converted to float32 by Sm90Compute).
template <epilogue::Activation Fn>
struct ActivationGradOp {
  template <class Fragment>
  struct Op {
    CUTLASS_DEVICE Fragment operator()(const Fragment& v, const Fragment& x) const {
      Fragment out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < Fragment::kElements; ++i)
        out[i] = v[i] * epilogue::activate_grad(Fn, x[i]);
      return out;
    }
  };
};

// The column sums see the float32 gradient; the rounding to T comes last.
template <class Element>
struct GeluGradColumnSum {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      RoundToD<ElementD>,
      fusion::Sm90EVT<
          ColumnSumPartials<Descriptor>,
          fusion::Sm90EVT<fusion::Sm90Compute<ActivationGradOp<epilogue::Activation::GeluTanh>::Op,
                                              float, float, kRound>,
                          fusion::Sm90AccFetch, AuxLoad<Descriptor, Element>>>>;
};

}  // namespace programs

template <DType E>
void run_gelu_grad_column_sum(const Problem& p, const epilogue::Program& program, int device,
                              Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  // Cooperative 128x256: 1.113x the plain product against 1.151x on the ping-pong kernel, on an
  // H200 (bench/results/2026-12-01_h200_gemm_epilogue_backward_scalar_rows.json, then
  // bench/results/2026-12-01_h200_gemm_epilogue_pingpong_trial.json).
  using Gemm = FusedGemm<Element, GeluGradColumnSum<Element>, DgradB>;
  const TensorView& pre = std::get<epilogue::ElementwiseGrad>(program.steps[0]).input;
  const TensorView* out = nullptr;
  const TensorView* sums = nullptr;
  for (const epilogue::Step& step : program.steps) {
    if (const auto* s = std::get_if<epilogue::Store>(&step)) out = &s->out;
    if (const auto* s = std::get_if<epilogue::ColumnSum>(&step)) sums = &s->out;
  }
  auto make_args = [&](float* partials) {
    return typename Gemm::Callbacks::Arguments{
        {{{},                                                                       // dy * w
          {pre.data_ptr<const Element>(), Element(0), matrix_stride(tma_row_stride(pre))},  // pre
          {}},                                                                      // * gelu'
         {partials, 0.0f, {}}},  // column partials
        {}};                     // round to D's type
  };
  launch_with_column_sums<Gemm>(p, *out, *sums, make_args, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_gelu_grad_column_sum)
// clang-format off
TG_FUSED_PROGRAM(run_gelu_grad_column_sum, Dgrad, "elementwise_grad(gelu_tanh, T) > store(T) > column_sum")
TG_FUSED_PROGRAM(run_gelu_grad_column_sum, Dgrad, "elementwise_grad(gelu_tanh, T) > column_sum > store(T)")
// clang-format on
