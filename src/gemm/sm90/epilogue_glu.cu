// Fused programs: glu(silu) > store(bfloat16) and glu(gelu_tanh) > store(bfloat16) - SwiGLU /
// GeGLU on the product of a fused gate+up projection, written at half its width.
#include "gemm/sm90/epilogue_glu.cuh"

namespace tilegrid::gemm::sm90 {

void run_glu(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const epilogue::Activation act = std::get<epilogue::Glu>(program.steps[0]).act;
  // Arguments nest as the tree does: the accumulator, then the pairs node (no arguments).
  if (act == epilogue::Activation::Silu)
    return programs::run_glu_gemm<programs::GatedPairs<epilogue::Activation::Silu>>(
        p, out, {{}, {}}, device, stream);
  return programs::run_glu_gemm<programs::GatedPairs<epilogue::Activation::GeluTanh>>(
      p, out, {{}, {}}, device, stream);
}

}  // namespace tilegrid::gemm::sm90
