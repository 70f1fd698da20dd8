// Fused program: per_column(add, bfloat16) > store(bfloat16) > elementwise(gelu_tanh) >
// store(bfloat16) - a linear layer's bias and GELU with the pre-activation saved for the
// backward, in one pass over the accumulator tile.
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {

void run_bias_gelu_aux(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<BiasActivationAux<epilogue::Activation::GeluTanh>>;
  const TensorView& bias = std::get<epilogue::PerColumn>(program.steps[0]).values;
  const TensorView& pre = std::get<epilogue::Store>(program.steps[1]).out;
  const TensorView& out = std::get<epilogue::Store>(program.steps[3]).out;
  // Arguments nest as the tree does: each node's children first, then its own.
  const typename Gemm::Callbacks::Arguments args{
      {                                                                            // aux store
       {                                                                           // acc + bias
        {},                                                                        // acc
        {bias.data_ptr<const cutlass::bfloat16_t>(), cutlass::bfloat16_t(0), {}},  // bias[j]
        {}},
       {pre.data_ptr<cutlass::bfloat16_t>(), matrix_stride(tma_row_stride(pre))}},
      {}};  // gelu
  CudaDeviceGuard guard(device);
  launch<Gemm>(with_output(p, out), args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90
