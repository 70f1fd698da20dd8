// Fused program: per_column(add, T) > store(T) > elementwise(gelu_tanh) > store(T) - a linear
// layer's bias and GELU with the pre-activation saved for the backward, in one pass over the
// accumulator tile: D = gelu(aux), aux = acc + bias[j] (rounded to T only where stored).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

template <epilogue::Activation Fn, class Element>
struct BiasActivationAux {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<ActivationOp<Fn>::template Op, ElementD, float, kRound>,
      fusion::Sm90EVT<
          AuxStore<Descriptor, Element>,
          fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,
                          fusion::Sm90AccFetch,
                          fusion::Sm90RowBroadcast<0, typename Descriptor::TileShape, Element,
                                                   float, ColumnVectorStride>>>>;
};

}  // namespace programs

template <DType E>
void run_bias_gelu_aux(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  using Gemm = FusedGemm<Element, BiasActivationAux<epilogue::Activation::GeluTanh, Element>>;
  const TensorView& bias = std::get<epilogue::PerColumn>(program.steps[0]).values;
  const TensorView& pre = std::get<epilogue::Store>(program.steps[1]).out;
  const TensorView& out = std::get<epilogue::Store>(program.steps[3]).out;
  // Arguments nest as the tree does: each node's children first, then its own.
  const typename Gemm::Callbacks::Arguments args{
      {                                                           // aux store
       {                                                          // acc + bias
        {},                                                       // acc
        {bias.data_ptr<const Element>(), Element(0), {}},         // bias[j]
        {}},
       {pre.data_ptr<Element>(), matrix_stride(tma_row_stride(pre))}},
      {}};  // gelu
  CudaDeviceGuard guard(device);
  launch<Gemm>(with_output(p, out), args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_bias_gelu_aux)
// clang-format off
TG_FUSED_PROGRAM(run_bias_gelu_aux, Fprop, "per_column(add, T) > store(T) > elementwise(gelu_tanh) > store(T)")
// clang-format on
