#pragma once
// Launches the KV-cache attention kernel and, with splits, its combine kernel for one (dtype,
// head dim) (internal); included once per head dimension by flash_decode_hdim<d>.cu.
#include <cuda_runtime.h>

#include "attention/attention_cuda.h"
#include "attention/cuda/flash_decode_kernel.cuh"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"

namespace tilegrid::attention::flash {

template <class Element, int kHeadDim>
void launch_decode(const FlashDecodeParams& p, cudaStream_t stream) {
  using Traits = DecodeTraits<Element, kHeadDim>;
  constexpr int kSmem = int(Traits::kSmemBytes);
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0) return;
  tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(&flash_decode_kernel<Traits>),
                                     kSmem, "flash attention over a KV cache");
  const int row_blocks = (p.seqlen_q * p.group + Traits::kRows - 1) / Traits::kRows;
  const dim3 grid(row_blocks * p.num_splits, p.heads_kv, p.batch);
  flash_decode_kernel<Traits><<<grid, Traits::kThreads, kSmem, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH();
  if (p.num_splits > 1) {
    constexpr int kRowsPerBlock = 4;  // a warp a row
    const int64_t total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    const auto blocks = static_cast<unsigned>((total + kRowsPerBlock - 1) / kRowsPerBlock);
    flash_decode_combine_kernel<Element, kHeadDim><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
    TG_CUDA_CHECK_LAUNCH();
  }
}

template <int kHeadDim>
void launch_decode(const FlashDecodeParams& p, DType dtype, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (dtype == DType::Float16)
    launch_decode<cutlass::half_t, kHeadDim>(p, s);
  else
    launch_decode<cutlass::bfloat16_t, kHeadDim>(p, s);
}

}  // namespace tilegrid::attention::flash
