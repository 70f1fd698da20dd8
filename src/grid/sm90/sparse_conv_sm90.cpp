// Which sparse convolutions the Hopper kernel takes (sparse_conv_sm90.h).
#include "grid/sm90/sparse_conv_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"

namespace tilegrid::grid::sm90 {
void sparse_conv_sm90_f16(const cuda::GatherGemm& g, cudaStream_t stream);
void sparse_conv_sm90_bf16(const cuda::GatherGemm& g, cudaStream_t stream);
}  // namespace tilegrid::grid::sm90

namespace tilegrid::grid::cuda {
namespace {

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

bool is_sm90(int device) {
  int major = 0, minor = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

}  // namespace

bool sparse_conv_forward_sm90(const GatherGemm& g, int device, Stream stream) {
  const bool half = g.dtype == DType::Float16, bf16 = g.dtype == DType::BFloat16;
  if (!(half || bf16) || g.in_channels % 8 || g.out_channels % 8 ||
      g.volume > sm90::kMaxTaps || g.rows == 0 || !aligned16(g.features) ||
      !aligned16(g.weight) || !aligned16(g.out) || !is_sm90(device))
    return false;
  const auto s = static_cast<cudaStream_t>(stream.handle);
  if (half)
    sm90::sparse_conv_sm90_f16(g, s);
  else
    sm90::sparse_conv_sm90_bf16(g, s);
  return true;
}

}  // namespace tilegrid::grid::cuda
