// Fused programs: scalar(multiply) > store(T) and scalar(add) > store(T) - the product times
// or plus one number (a loss scale, a logit temperature, a constant shift).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

// D = alpha * acc + beta, one kernel for both: (value, 0) multiplies and (1, value) adds. A
// fused multiply-add rounds once, so either is the single float32 operation the program
// names (the CPU evaluator's, up to value's rounding to float32).
struct ScalarAffine {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, float, kRound>,
      fusion::Sm90ScalarBroadcast<float>, fusion::Sm90AccFetch,
      fusion::Sm90ScalarBroadcast<float>>;
};

}  // namespace programs

template <DType E>
void run_scalar(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  using Gemm = programs::FusedGemm<programs::ElementOf<E>, programs::ScalarAffine>;
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

TG_FUSED_LAUNCHER(run_scalar)
TG_FUSED_PROGRAM(run_scalar, Fprop, "scalar(multiply) > store(T)")
TG_FUSED_PROGRAM(run_scalar, Fprop, "scalar(add) > store(T)")
