// The Hopper sparse convolution kernels for bfloat16 (sparse_conv_sm90_kernel.cuh).
#include "grid/conv/sm90/sparse_conv_sm90_launch.cuh"

namespace tilegrid::grid::sm90 {

void sparse_conv_sm90_bf16(const cuda::GatherGemm& g, cudaStream_t stream) {
  launch_sparse_conv_sm90<cutlass::bfloat16_t>(g, stream);
}

void sparse_conv_sm90_wgrad_bf16(const WgradKernelParams& p, int tile, cudaStream_t stream) {
  launch_sparse_conv_sm90_wgrad<cutlass::bfloat16_t>(p, tile, stream);
}

}  // namespace tilegrid::grid::sm90
