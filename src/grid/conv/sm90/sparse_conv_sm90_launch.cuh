#pragma once
// Launch of the Hopper sparse convolution kernel for one element type (included by one
// translation unit a type: sparse_conv_sm90_f16.cu, sparse_conv_sm90_bf16.cu).
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "grid/conv/conv_cuda.h"
#include "grid/conv/sm90/sparse_conv_sm90_kernel.cuh"
#include "grid/conv/sm90/sparse_conv_sm90_wgrad_kernel.cuh"

namespace tilegrid::grid::sm90 {

template <class Traits, int kMinBlocks>
void launch(const cuda::GatherGemm& g, cudaStream_t stream) {
  auto* kernel = &sparse_conv_sm90_kernel<Traits, kMinBlocks>;
  tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Traits::kSmemBytes,
                                     "sparse convolution (sm90)");
  ConvKernelParams p{};
  p.map = g.map;
  p.row_order = g.row_order;
  p.map_in_row_order = g.map_in_row_order;
  p.volume = g.volume;
  p.rows = g.rows;
  p.features = g.features;
  p.feature_rows = g.feature_rows;
  p.weight = g.weight;
  p.cin = g.in_channels;
  p.cout = g.out_channels;
  p.out = g.out;
  p.epilogue = g.epilogue;
  p.col_tiles = int((g.out_channels + Traits::kBlockN - 1) / Traits::kBlockN);
  const int64_t row_tiles = (g.rows + Traits::kBlockM - 1) / Traits::kBlockM;
  kernel<<<dim3(unsigned(row_tiles * p.col_tiles)), Traits::kThreads, Traits::kSmemBytes, stream>>>(
      p);
  TG_CUDA_CHECK_LAUNCH();
}

// Tiles: 128 x 128 output channels at C_out a multiple of 128 (one CTA an SM, 5 stages);
// 128 x 64 otherwise (two CTAs an SM, 4 stages each), so that two CTAs' tile starts (the map
// reads) overlap each other's products.
template <class Element, bool kTransposedWeight>
void launch_for(const cuda::GatherGemm& g, cudaStream_t stream) {
  if (g.out_channels % 128 == 0)
    launch<ConvTraits<Element, 128, 5, kTransposedWeight>, 1>(g, stream);
  else
    launch<ConvTraits<Element, 64, 4, kTransposedWeight>, 2>(g, stream);
}

template <class Element>
void launch_sparse_conv_sm90(const cuda::GatherGemm& g, cudaStream_t stream) {
  if (g.transpose_weight)
    launch_for<Element, true>(g, stream);
  else
    launch_for<Element, false>(g, stream);
}

template <class Traits>
void launch_wgrad_with(WgradKernelParams p, int64_t volume, cudaStream_t stream) {
  auto* kernel = &sparse_conv_sm90_wgrad_kernel<Traits>;
  tilegrid::cuda::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Traits::kSmemBytes,
                                     "sparse convolution weight gradient (sm90)");
  const int64_t m_tiles = (p.cin + Traits::kBlockM - 1) / Traits::kBlockM;
  p.n_tiles = int((p.cout + Traits::kBlockN - 1) / Traits::kBlockN);
  const dim3 grid(unsigned(m_tiles * p.n_tiles), unsigned(volume), unsigned(p.chunks));
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH();
}

// Weight-gradient tiles: 128 x 128 (6 stages of 32 KB) or 64 x 64 (8 stages of 16 KB), both
// warpgroups multiplying; see wgrad_tile_rows.
template <class Element>
void launch_sparse_conv_sm90_wgrad(const WgradKernelParams& p, int tile, cudaStream_t stream) {
  if (tile == 128)
    launch_wgrad_with<WgradTraits<Element, 2, 6>>(p, p.volume, stream);
  else
    launch_wgrad_with<WgradTraits<Element, 1, 8>>(p, p.volume, stream);
}

}  // namespace tilegrid::grid::sm90
