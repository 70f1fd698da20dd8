// Fused program: store(bfloat16) > column_sum (or column_sum > store(bfloat16)) - the
// product and its column sums over M in one pass, plus a small finishing kernel.
#include "core/cuda_check.h"
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace {

// sums[j] = sum over the M tiles t of partials[t][j], in tile order (deterministic). One
// thread a column: its loads are independent (unrolled), and neighbours read neighbouring
// addresses. At 8192 x 4096: 64 x 4096 partials, 1 MiB read.
__global__ void sum_partial_rows(const float* partials, int64_t tiles, int64_t ld, int64_t n,
                                 float* sums) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float sum = 0.f;
#pragma unroll 8
  for (int64_t t = 0; t < tiles; ++t) sum += partials[t * ld + j];
  sums[j] = sum;
}

}  // namespace

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
  CudaDeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  // The reduction node's partials: one row of round_up(N, 256) float32 per M tile.
  const int64_t tiles = (p.m + kTileM - 1) / kTileM;
  const int64_t ld = (p.n + kTileN - 1) / kTileN * kTileN;
  Tensor partials = Tensor::empty({tiles * ld}, DType::Float32, Device::cuda(device), stream);

  // Arguments nest as the tree does: each node's children first, then its own.
  const typename Gemm::Callbacks::Arguments args{
      {{},                                                   // acc
       {static_cast<float*>(partials.data()), 0.0f, {}}},   // partials[t][j] (identity 0)
      {}};                                                   // identity
  launch<Gemm>(with_output(p, *out), args, device, s);

  constexpr int kThreads = 256;
  const dim3 blocks(unsigned((p.n + kThreads - 1) / kThreads));
  sum_partial_rows<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(partials.data()), tiles,
                                               ld, p.n, sums->data_ptr<float>());
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::gemm::sm90
