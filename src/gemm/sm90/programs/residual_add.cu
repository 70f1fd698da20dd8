// Fused program: tile(add, T) > store(T) - a residual connection added to the product of the
// projection before it (h = x + attn W_o^T, out = h + mlp W_down^T in a pre-norm block):
// D = acc + residual (TMA-loaded, rounded once), so the sum never makes a separate pass.
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

template <class Element>
struct ResidualAdd {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, ElementD, float, kRound>,
                                    fusion::Sm90AccFetch, AuxLoad<Descriptor, Element>>;
};

}  // namespace programs

template <DType E>
void run_residual_add(const Problem& p, const epilogue::Program& program, int device,
                      Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  using Gemm = FusedGemm<Element, ResidualAdd<Element>>;
  const TensorView& residual = std::get<epilogue::Tile>(program.steps[0]).values;
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const typename Gemm::Callbacks::Arguments args{
      {},  // acc
      {residual.data_ptr<const Element>(), Element(0),
       matrix_stride(tma_row_stride(residual))},  // residual(i, j)
      {}};                                        // acc + residual
  CudaDeviceGuard guard(device);
  launch<Gemm>(with_output(p, out), args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_residual_add)
TG_FUSED_PROGRAM(run_residual_add, Fprop, "tile(add, T) > store(T)")
