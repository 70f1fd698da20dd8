// The Hopper sparse convolution kernels for float16 (sparse_conv_sm90_kernel.cuh).
#include "grid/conv/sm90/sparse_conv_sm90_launch.cuh"

namespace tilegrid::grid::sm90 {

void sparse_conv_sm90_f16(const cuda::GatherGemm& g, cudaStream_t stream) {
  launch_sparse_conv_sm90<cutlass::half_t>(g, stream);
}

void sparse_conv_sm90_wgrad_f16(const WgradKernelParams& p, int tile, cudaStream_t stream) {
  launch_sparse_conv_sm90_wgrad<cutlass::half_t>(p, tile, stream);
}

}  // namespace tilegrid::grid::sm90
