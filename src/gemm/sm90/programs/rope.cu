// Fused programs: rope > store(T) and rope(inverse) > store(T) - rotary position embedding
// applied to the product of a QKV projection before it is written (the pairs of v's columns
// get frequency 0): D = rotate(acc), positions[i] (float32, per row), frequencies per column.
#include "gemm/sm90/epilogue_programs.cuh"
#include "gemm/sm90/epilogue_rope.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

struct RopeRotation {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<RopeOp::template Op, ElementD, float, kRound>, fusion::Sm90AccFetch,
      fusion::Sm90ColBroadcast<0, typename Descriptor::TileShape, float, float, RowVectorStride>,
      fusion::Sm90RowBroadcast<0, typename Descriptor::TileShape, float, float,
                               ColumnVectorStride>>;
};

}  // namespace programs

template <DType E>
void run_rope(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<ElementOf<E>, RopeRotation>;
  const auto& rope = std::get<epilogue::Rope>(program.steps[0]);
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  CudaDeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream.handle);

  const RopeOperands operands = rope_operands_of(p, rope, device, stream);
  // Arguments nest as the tree does: each node's children first, then its own.
  const typename Gemm::Callbacks::Arguments args{
      {},                                 // acc
      {operands.positions, 0.0f, {}},    // positions[i]
      {operands.frequencies, 0.0f, {}},  // frequency of column j
      {}};                                // rotate
  launch<Gemm>(with_output(p, out), args, device, s);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_rope)
TG_FUSED_PROGRAM(run_rope, Fprop, "rope > store(T)")
TG_FUSED_PROGRAM(run_rope, Fprop, "rope(inverse) > store(T)")  // the frequencies negated
