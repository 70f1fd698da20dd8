// Which sparse convolutions the Hopper kernel takes (sparse_conv_sm90.h).
#include "grid/conv/sm90/sparse_conv_sm90.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_launch.h"
#include "grid/conv/sm90/sparse_conv_sm90_params.h"
#include "grid/conv/sm90/sparse_conv_sm90_steps.h"

namespace tilegrid::grid::sm90 {
void sparse_conv_sm90_f16(const cuda::GatherGemm& g, cudaStream_t stream);
void sparse_conv_sm90_bf16(const cuda::GatherGemm& g, cudaStream_t stream);
void sparse_conv_sm90_wgrad_f16(const WgradKernelParams& p, int tile, cudaStream_t stream);
void sparse_conv_sm90_wgrad_bf16(const WgradKernelParams& p, int tile, cudaStream_t stream);
}  // namespace tilegrid::grid::sm90

namespace tilegrid::grid::cuda {
namespace {

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

bool sparse_conv_forward_sm90(const GatherGemm& g, Stream stream) {
  const bool half = g.dtype == DType::Float16, bf16 = g.dtype == DType::BFloat16;
  if (!(half || bf16) || g.in_channels % 8 || g.out_channels % 8 || g.volume > sm90::kMaxTaps ||
      g.rows == 0 || !aligned16(g.features) || !aligned16(g.weight) || !aligned16(g.out))
    return false;
  const auto s = static_cast<cudaStream_t>(stream.handle);
  if (half)
    sm90::sparse_conv_sm90_f16(g, s);
  else
    sm90::sparse_conv_sm90_bf16(g, s);
  return true;
}

bool sparse_conv_weight_partials_sm90(const WeightGrad& g, int device, Stream stream,
                                      Tensor& partials, int64_t& chunks) {
  const bool half = g.dtype == DType::Float16, bf16 = g.dtype == DType::BFloat16;
  if (!(half || bf16) || g.in_channels % 8 || g.out_channels % 8 || g.rows == 0 ||
      !aligned16(g.features) || !aligned16(g.grad_out))
    return false;
  // 128 x 128 tiles where both channel counts are multiples of 128, else 64 x 64.
  const int tile = g.in_channels % 128 == 0 && g.out_channels % 128 == 0 ? 128 : 64;
  const int64_t tiles = ((g.in_channels + tile - 1) / tile) * ((g.out_channels + tile - 1) / tile);
  const int sms = tilegrid::cuda::multiprocessor_count(device);
  // About four CTAs an SM (each tap's steps split in `chunks`), and at most 64 MB of partials
  // (27 x 256 x 256 floats are 7 MB a chunk). Depends on the shapes only: the chunk sums are
  // the same bits on every run.
  const int64_t bytes_a_chunk = g.volume * g.in_channels * g.out_channels * int64_t(sizeof(float));
  const int64_t by_memory = std::max<int64_t>(1, (int64_t(64) << 20) / bytes_a_chunk);
  const int64_t by_sms = (4 * int64_t(sms) + tiles * g.volume - 1) / (tiles * g.volume);
  chunks = std::clamp<int64_t>(std::min(by_sms, by_memory), 1, 64);
  const sm90::WgradSteps steps = sm90::wgrad_steps(g.map, g.row_order, g.map_in_row_order, g.volume,
                                                   g.rows, g.feature_rows, device, stream);
  partials = Tensor::empty({chunks * bytes_a_chunk}, DType::UInt8, Device::cuda(device), stream);
  sm90::WgradKernelParams p{};
  p.pairs = static_cast<const int2*>(steps.pairs.data());
  p.tap_begin = static_cast<const int32_t*>(steps.tap_begin.data());
  p.features = g.features;
  p.grad_out = g.grad_out;
  p.cin = g.in_channels;
  p.cout = g.out_channels;
  p.volume = g.volume;
  p.chunks = int(chunks);
  p.partials = static_cast<float*>(partials.data());
  const auto s = static_cast<cudaStream_t>(stream.handle);
  if (half)
    sm90::sparse_conv_sm90_wgrad_f16(p, tile, s);
  else
    sm90::sparse_conv_sm90_wgrad_bf16(p, tile, s);
  return true;
}

}  // namespace tilegrid::grid::cuda
