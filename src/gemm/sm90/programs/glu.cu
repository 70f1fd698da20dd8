// Fused programs: glu(silu) > store(T) and glu(gelu_tanh) > store(T) - SwiGLU / GeGLU on the
// product of a fused gate+up projection whose weight rows interleave gate and up, written at
// half its width. D is the bytes of the [M, N / 2] result (GluAsBytes).
#include "gemm/sm90/epilogue_glu.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

template <epilogue::Activation Fn, class Element>
struct GatedPairs {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<GluAsBytes<Fn, Element>, fusion::Sm90AccFetch>;
};

}  // namespace programs

template <DType E>
void run_glu(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  using epilogue::Activation;
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  // Arguments nest as the tree does: the accumulator, then the pairs node (no arguments).
  if (std::get<epilogue::Glu>(program.steps[0]).act == Activation::Silu)
    return run_glu_gemm<Element, GatedPairs<Activation::Silu, Element>>(p, out, {{}, {}}, device,
                                                                        stream);
  return run_glu_gemm<Element, GatedPairs<Activation::GeluTanh, Element>>(p, out, {{}, {}},
                                                                          device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_glu)
TG_FUSED_PROGRAM(run_glu, Fprop, "glu(silu) > store(T)")
TG_FUSED_PROGRAM(run_glu, Fprop, "glu(gelu_tanh) > store(T)")
