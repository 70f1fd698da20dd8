// Fused program: per_column(add, T) > rope > store(T) - a QKV projection with biases (Qwen2's
// q/k/v_proj) and rotary position embedding, in one pass over the accumulator tile:
// D = rotate(acc + bias[j]), the bias added in float32 before the rotation, positions[i]
// (float32, per row) and frequencies per column as in programs/rope.cu.
#include "gemm/sm90/epilogue_programs.cuh"
#include "gemm/sm90/epilogue_rope.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

template <class Element>
struct BiasRopeRotation {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<RopeOp::template Op, ElementD, float, kRound>,
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,
                      fusion::Sm90AccFetch,
                      fusion::Sm90RowBroadcast<0, typename Descriptor::TileShape, Element, float,
                                               ColumnVectorStride>>,
      fusion::Sm90ColBroadcast<0, typename Descriptor::TileShape, float, float, RowVectorStride>,
      fusion::Sm90RowBroadcast<0, typename Descriptor::TileShape, float, float,
                               ColumnVectorStride>>;
};

}  // namespace programs

template <DType E>
void run_bias_rope(const Problem& p, const epilogue::Program& program, int device,
                   Stream stream) {
  using namespace programs;
  using Element = ElementOf<E>;
  using Gemm = FusedGemm<Element, BiasRopeRotation<Element>>;
  const TensorView& bias = std::get<epilogue::PerColumn>(program.steps[0]).values;
  const auto& rope = std::get<epilogue::Rope>(program.steps[1]);
  const TensorView& out = std::get<epilogue::Store>(program.steps[2]).out;
  CudaDeviceGuard guard(device);

  const RopeOperands operands = rope_operands_of(p, rope, device, stream);
  // Arguments nest as the tree does: each node's children first, then its own.
  const typename Gemm::Callbacks::Arguments args{
      {                                                    // acc + bias
       {},                                                 // acc
       {bias.data_ptr<const Element>(), Element(0), {}},  // bias[j]
       {}},
      {operands.positions, 0.0f, {}},    // positions[i]
      {operands.frequencies, 0.0f, {}},  // frequency of column j
      {}};                                // rotate
  launch<Gemm>(with_output(p, out), args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_bias_rope)
TG_FUSED_PROGRAM(run_bias_rope, Fprop, "per_column(add, T) > rope > store(T)")
