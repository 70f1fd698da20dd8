// Fused programs: scalar(multiply) > store(bfloat16) and scalar(add) > store(bfloat16) - the
// product times or plus one number (a loss scale, a logit temperature, a constant shift).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace {

// D = alpha * acc + beta, one kernel for both: (value, 0) multiplies and (1, value) adds. A
// fused multiply-add rounds once, so either is the single float32 operation the program
// names (the CPU evaluator's, up to value's rounding to float32).
struct ScalarAffine {
  template <class ElementD, class Descriptor>
  using Callbacks =
      programs::fusion::Sm90EVT<programs::fusion::Sm90Compute<cutlass::homogeneous_multiply_add,
                                                              ElementD, float, programs::kRound>,
                                programs::fusion::Sm90ScalarBroadcast<float>,
                                programs::fusion::Sm90AccFetch,
                                programs::fusion::Sm90ScalarBroadcast<float>>;
};

}  // namespace

void run_scalar(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  using Gemm = programs::FusedGemm<ScalarAffine>;
  const auto& step = std::get<epilogue::Scalar>(program.steps[0]);
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const auto value = static_cast<float>(step.value);
  const bool multiply = step.combine == epilogue::Combine::Multiply;
  const typename Gemm::Callbacks::Arguments args{{{multiply ? value : 1.0f}},  // alpha
                                                 {},                           // acc
                                                 {{multiply ? 0.0f : value}},  // beta
                                                 {}};                          // alpha * acc + beta
  CudaDeviceGuard guard(device);
  launch<Gemm>(programs::with_output(p, out), args, device,
               static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90
