// Fused programs: store(bfloat16) > glu(silu | gelu_tanh) > store(bfloat16) - SwiGLU / GeGLU
// with the [M, N] pre-activation saved for the backward (glu_grad reads it).
#include "gemm/sm90/epilogue_glu.cuh"

namespace tilegrid::gemm::sm90 {

void run_store_glu(const Problem& p, const epilogue::Program& program, int device,
                   Stream stream) {
  using namespace programs;
  const TensorView& pre = std::get<epilogue::Store>(program.steps[0]).out;
  const epilogue::Activation act = std::get<epilogue::Glu>(program.steps[1]).act;
  const TensorView& out = std::get<epilogue::Store>(program.steps[2]).out;
  auto* pre_data = pre.data_ptr<cutlass::bfloat16_t>();
  const MatrixStride pre_stride = matrix_stride(tma_row_stride(pre));
  // Arguments nest as the tree does: {{acc, aux store}, pairs}.
  if (act == epilogue::Activation::Silu)
    return run_glu_gemm<StoreGatedPairs<epilogue::Activation::Silu>>(
        p, out, {{{}, {pre_data, pre_stride}}, {}}, device, stream);
  return run_glu_gemm<StoreGatedPairs<epilogue::Activation::GeluTanh>>(
      p, out, {{{}, {pre_data, pre_stride}}, {}}, device, stream);
}

}  // namespace tilegrid::gemm::sm90
