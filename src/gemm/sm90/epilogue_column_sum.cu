// Fused program: store(bfloat16) > column_sum (or column_sum > store(bfloat16)) - the
// product and its column sums over M in one pass.
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {

void run_store_column_sum(const Problem& p, const epilogue::Program& program, int device,
                          Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<StoreColumnSum>;
  const TensorView* out = nullptr;
  const TensorView* sums = nullptr;
  for (const epilogue::Step& step : program.steps) {
    if (const auto* s = std::get_if<epilogue::Store>(&step)) out = &s->out;
    if (const auto* s = std::get_if<epilogue::ColumnSum>(&step)) sums = &s->out;
  }
  // Arguments nest as the tree does: each node's children first, then its own.
  const typename Gemm::Callbacks::Arguments args{
      {{},                                        // acc
       {sums->data_ptr<float>(), 0.0f, {}}},      // sums[j] (identity 0)
      {}};                                        // identity
  CudaDeviceGuard guard(device);
  launch<Gemm>(with_output(p, *out), args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90
