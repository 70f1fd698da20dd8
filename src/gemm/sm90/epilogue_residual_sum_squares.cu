// Fused program: tile(add, bfloat16) > store(bfloat16) > row_partials(sum_squares, 256) - the
// residual add after an attention or MLP output projection, with the per-tile row sums of
// squares of the new residual stream that the next RMSNorm needs (finish_row_partials turns
// them into the full rows' sums).
#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace {

// CUTLASS's non-final column reduction leaves partial t of row i at buffer[t * m_pad + i]
// (m_pad = M rounded up to the 128-row tile); the program's layout is partials[i * count + t].
// M * count floats (512 KB at M = 8192, N = 4096): a few microseconds next to the GEMM.
__global__ void transpose_partials(const float* buffer, int64_t m, int64_t m_pad, int64_t count,
                                   float* partials) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * count) return;
  const int64_t i = idx / count, t = idx % count;
  partials[idx] = buffer[t * m_pad + i];
}

}  // namespace

void run_residual_sum_squares(const Problem& p, const epilogue::Program& program, int device,
                              Stream stream) {
  using namespace programs;
  using Gemm = FusedGemm<ResidualSumSquares>;
  const TensorView& residual = std::get<epilogue::Tile>(program.steps[0]).values;
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  const TensorView& partials = std::get<epilogue::RowPartials>(program.steps[2]).partials;

  CudaDeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t count = (p.n + kTileN - 1) / kTileN;
  const int64_t m_pad = (p.m + kTileM - 1) / kTileM * kTileM;
  Tensor buffer = Tensor::empty({count * m_pad}, DType::Float32, Device::cuda(device), stream);

  const typename Gemm::Callbacks::Arguments args{
      {      // row partials
       {     // acc + residual
        {},  // acc
        {residual.data_ptr<const cutlass::bfloat16_t>(), cutlass::bfloat16_t(0),
         matrix_stride(tma_row_stride(residual))},  // residual(i, j)
        {}},
       {buffer.data(), 0.0f, {}}},
      {}};  // round to D's type
  launch<Gemm>(with_output(p, out), args, device, s);

  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((p.m * count + kThreads - 1) / kThreads);
  transpose_partials<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(buffer.data()), p.m,
                                                 m_pad, count, partials.data_ptr<float>());
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::gemm::sm90
