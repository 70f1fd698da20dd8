// Fused program: per_row(multiply, float32) > store(T) - the product scaled by a per-token
// factor (e.g. an RMSNorm's 1/rms applied after the matmul instead of before): D = acc *
// scale[i].
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

struct RowScale {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, fusion::Sm90AccFetch,
      fusion::Sm90ColBroadcast<0, typename Descriptor::TileShape, float, float, RowVectorStride>>;
};

}  // namespace programs

template <DType E>
void run_row_scale(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<ElementOf<E>, RowScale>;
  const TensorView& scale = std::get<epilogue::PerRow>(program.steps[0]).values;
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const typename Gemm::Callbacks::Arguments args{
      {},                                         // acc
      {scale.data_ptr<const float>(), 0.0f, {}},  // scale[i]
      {}};                                        // multiply
  CudaDeviceGuard guard(device);
  launch<Gemm>(with_output(p, out), args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_row_scale)
TG_FUSED_PROGRAM(run_row_scale, Fprop, "per_row(multiply, float32) > store(T)")
