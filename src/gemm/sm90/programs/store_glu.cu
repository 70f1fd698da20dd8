// Fused programs: store(T) > glu(silu | gelu_tanh) > store(T) - SwiGLU / GeGLU with the
// [M, N] pre-activation saved for the backward (glu_grad reads it) as an auxiliary TMA store.
#include "gemm/sm90/epilogue_glu.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

template <epilogue::Activation Fn, class Element>
struct StoreGatedPairs {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      GluAsBytes<Fn, Element>,
      fusion::Sm90EVT<AuxStore<Descriptor, Element>, fusion::Sm90AccFetch>>;
};

}  // namespace programs

template <DType E>
void run_store_glu(const Problem& p, const epilogue::Program& program, int device,
                   Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  using epilogue::Activation;
  const TensorView& pre = std::get<epilogue::Store>(program.steps[0]).out;
  const Activation act = std::get<epilogue::Glu>(program.steps[1]).act;
  const TensorView& out = std::get<epilogue::Store>(program.steps[2]).out;
  auto* pre_data = pre.data_ptr<Element>();
  const MatrixStride pre_stride = matrix_stride(tma_row_stride(pre));
  // Arguments nest as the tree does: {{acc, aux store}, pairs}.
  if (act == Activation::Silu)
    return run_glu_gemm<Element, StoreGatedPairs<Activation::Silu, Element>>(
        p, out, {{{}, {pre_data, pre_stride}}, {}}, device, stream);
  return run_glu_gemm<Element, StoreGatedPairs<Activation::GeluTanh, Element>>(
      p, out, {{{}, {pre_data, pre_stride}}, {}}, device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_store_glu)
TG_FUSED_PROGRAM(run_store_glu, Fprop, "store(T) > glu(silu) > store(T)")
TG_FUSED_PROGRAM(run_store_glu, Fprop, "store(T) > glu(gelu_tanh) > store(T)")
