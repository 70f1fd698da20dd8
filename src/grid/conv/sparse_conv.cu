// Sparse convolution GEMMs on CUDA cores (any GPU; float32, float64, and the shapes the tensor-core
// kernels of sparse_conv_mma.cu do not take): output-stationary implicit GEMM over the kernel map.
//
// Forward / input gradient: a block owns 64 output rows x 64 output channels; for each tap it
// gathers the 64 input rows the map names (zeros where a row is absent) 16 channels at a time
// into shared memory, with the matching 16 x 64 slice of the tap's weight, and each of 256
// threads accumulates a 4 x 4 patch. Taps where none of the block's 64 rows has an input are
// skipped. Every output element is written exactly once (no atomics): deterministic.
//
// Weight gradient: a block owns a 64 x 64 tile of one tap's weight and a fixed chunk of output
// rows, accumulating features[map]^T . grad_out 16 rows at a time; the chunks' float32 (float64)
// partials are then summed in chunk order by a second kernel. The chunk count depends only on
// the shapes, so the result is the same bits on every run.
#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/cuda_convert.cuh"
#include "grid/conv/conv_cuda.h"
#include "tilegrid/core/kernel_choice.h"
#ifdef TILEGRID_WITH_SM90_CONV
#include "grid/conv/sm90/sparse_conv_sm90.h"
#endif

namespace tilegrid::grid::cuda {
namespace {

constexpr int kTileRows = 64, kTileCols = 64, kTileK = 16, kThreads = 256;

cudaStream_t raw(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}

template <class Acc, class T>
__device__ __forceinline__ Acc widen(T v) {
  return Acc(cuda_convert::to_float(v));
}
template <>
__device__ __forceinline__ double widen<double, double>(double v) {
  return v;
}

template <class T, class Acc>
__device__ __forceinline__ T narrow(Acc v) {
  return cuda_convert::from_float<T>(float(v));
}
template <>
__device__ __forceinline__ double narrow<double, double>(double v) {
  return v;
}

template <class T, class Acc>
__global__ void __launch_bounds__(kThreads)
    gather_gemm_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t rows,
                       const T* __restrict__ features, int64_t feature_rows,
                       const T* __restrict__ weight, int64_t cin, int64_t cout,
                       bool transpose_weight, T* __restrict__ out) {
  __shared__ Acc a_tile[kTileK][kTileRows];  // gathered features, channel-major
  __shared__ Acc b_tile[kTileK][kTileCols];  // the tap's weight slice
  __shared__ int32_t in_rows[kTileRows];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t row0 = int64_t(blockIdx.x) * kTileRows, col0 = int64_t(blockIdx.y) * kTileCols;
  Acc acc[4][4] = {};
  for (int64_t t = 0; t < volume; ++t) {
    int present = 0;
    if (tid < kTileRows) {
      const int64_t r = row0 + tid;
      int32_t n = r < rows ? map[t * rows + r] : -1;
      if (n >= feature_rows) n = -1;
      in_rows[tid] = n;
      present = n >= 0;
    }
    if (!__syncthreads_or(present)) continue;
    for (int64_t k0 = 0; k0 < cin; k0 += kTileK) {
      for (int e = tid; e < kTileK * kTileRows; e += kThreads) {
        const int r = e / kTileK, kk = e % kTileK;  // consecutive threads: one row's channels
        const int32_t n = in_rows[r];
        a_tile[kk][r] = (n >= 0 && k0 + kk < cin) ? widen<Acc>(features[n * cin + k0 + kk]) : Acc(0);
      }
      for (int e = tid; e < kTileK * kTileCols; e += kThreads) {
        const int kk = e / kTileCols, c = e % kTileCols;
        const int64_t k = k0 + kk, col = col0 + c;
        Acc w = 0;
        if (k < cin && col < cout)
          w = widen<Acc>(transpose_weight ? weight[(t * cout + col) * cin + k]
                                          : weight[(t * cin + k) * cout + col]);
        b_tile[kk][c] = w;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTileK; ++kk) {
        Acc a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = a_tile[kk][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = b_tile[kk][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + ty * 4 + i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = col0 + tx * 4 + j;
      if (c < cout) out[r * cout + c] = narrow<T>(acc[i][j]);
    }
  }
}

// partials[chunk][t][ci][co] for the block's tap, chunk and 64 x 64 tile.
template <class T, class Acc>
__global__ void __launch_bounds__(kThreads)
    weight_grad_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t rows,
                       const T* __restrict__ features, int64_t feature_rows,
                       const T* __restrict__ grad_out, int64_t cin, int64_t cout,
                       int64_t chunk_rows, Acc* __restrict__ partials) {
  __shared__ Acc a_tile[kTileK][kTileRows];  // features[map[t][o]][ci], row-major in o
  __shared__ Acc b_tile[kTileK][kTileCols];  // grad_out[o][co]
  __shared__ int32_t in_rows[kTileK];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t ci0 = int64_t(blockIdx.x) * kTileRows, co0 = int64_t(blockIdx.y) * kTileCols;
  const int64_t t = int64_t(blockIdx.z) % volume, chunk = int64_t(blockIdx.z) / volume;
  const int64_t first = chunk * chunk_rows, last = std::min<int64_t>(rows, first + chunk_rows);
  Acc acc[4][4] = {};
  for (int64_t o0 = first; o0 < last; o0 += kTileK) {
    int present = 0;
    if (tid < kTileK) {
      const int64_t o = o0 + tid;
      int32_t n = o < last ? map[t * rows + o] : -1;
      if (n >= feature_rows) n = -1;
      in_rows[tid] = n;
      present = n >= 0;
    }
    if (!__syncthreads_or(present)) continue;
    for (int e = tid; e < kTileK * kTileRows; e += kThreads) {
      const int kk = e / kTileRows, c = e % kTileRows;
      const int32_t n = in_rows[kk];
      a_tile[kk][c] = (n >= 0 && ci0 + c < cin) ? widen<Acc>(features[n * cin + ci0 + c]) : Acc(0);
    }
    for (int e = tid; e < kTileK * kTileCols; e += kThreads) {
      const int kk = e / kTileCols, c = e % kTileCols;
      // Rows whose input is absent contribute nothing: their features are zero above.
      b_tile[kk][c] = (in_rows[kk] >= 0 && co0 + c < cout)
                          ? widen<Acc>(grad_out[(o0 + kk) * cout + co0 + c])
                          : Acc(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      Acc a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = a_tile[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = b_tile[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  Acc* tile = partials + (chunk * volume + t) * cin * cout;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t ci = ci0 + ty * 4 + i;
    if (ci >= cin) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t co = co0 + tx * 4 + j;
      if (co < cout) tile[ci * cout + co] = acc[i][j];
    }
  }
}

template <class T, class Acc>
__global__ void sum_chunks_kernel(const Acc* __restrict__ partials, int64_t chunks, int64_t n,
                                  T* __restrict__ out) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    Acc sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partials[c * n + e];
    out[e] = narrow<T>(sum);
  }
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <class T, class Acc>
void launch_forward(const GatherGemm& p, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(p.rows, kTileRows)), unsigned(ceil_div(p.out_channels, kTileCols)));
  gather_gemm_kernel<T, Acc><<<grid, kThreads, 0, s>>>(
      p.map, p.volume, p.rows, static_cast<const T*>(p.features), p.feature_rows,
      static_cast<const T*>(p.weight), p.in_channels, p.out_channels, p.transpose_weight,
      static_cast<T*>(p.out));
  TG_CUDA_CHECK_LAUNCH();
}

template <class T, class Acc>
void sum_chunks(const Tensor& partials, int64_t chunks, int64_t n, void* grad_weight,
                cudaStream_t s) {
  sum_chunks_kernel<T, Acc><<<unsigned(std::min<int64_t>(ceil_div(n, 256), 1 << 16)), 256, 0, s>>>(
      static_cast<const Acc*>(partials.data()), chunks, n, static_cast<T*>(grad_weight));
  TG_CUDA_CHECK_LAUNCH();
}

template <class T, class Acc>
void launch_weight_grad(const WeightGrad& p, int device, Stream stream, KernelPath kernel) {
  const cudaStream_t s = raw(stream);
#ifdef TILEGRID_WITH_SM90_CONV
  if constexpr (std::is_same_v<Acc, float>) {
    Tensor hopper_partials;
    int64_t hopper_chunks = 0;
    if (kernel == KernelPath::Auto && hopper_kernels_run_on(KernelFamily::SparseConv, device) &&
        sparse_conv_weight_partials_sm90(p, device, stream, hopper_partials, hopper_chunks))
      return sum_chunks<T, Acc>(hopper_partials, hopper_chunks,
                                p.volume * p.in_channels * p.out_channels, p.grad_weight, s);
  }
#endif
  const int64_t tiles = ceil_div(p.in_channels, kTileRows) * ceil_div(p.out_channels, kTileCols);
  // About 2048 (tap, tile, chunk) blocks, chunks of at least 256 rows: enough blocks to fill a
  // GPU, and partials of at most ~2048 x 64 x 64 elements.
  const int64_t want = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, p.volume * tiles));
  const int64_t chunks = std::max<int64_t>(1, std::min(want, ceil_div(p.rows, 256)));
  const int64_t chunk_rows = ceil_div(std::max<int64_t>(p.rows, 1), chunks);
  const int64_t n = p.volume * p.in_channels * p.out_channels;
  Tensor partials = Tensor::empty({chunks * n * int64_t(sizeof(Acc))}, DType::UInt8,
                                  Device::cuda(device), stream);
  const dim3 grid(unsigned(ceil_div(p.in_channels, kTileRows)),
                  unsigned(ceil_div(p.out_channels, kTileCols)), unsigned(chunks * p.volume));
  Acc* partial = static_cast<Acc*>(partials.data());
  bool done = false;
  if constexpr (std::is_same_v<Acc, float>)
    if (kernel != KernelPath::Simt)
      done = sparse_conv_weight_partials_mma(p, chunks, chunk_rows, partial, device, stream);
  if (!done) {
    weight_grad_kernel<T, Acc><<<grid, kThreads, 0, s>>>(
        p.map, p.volume, p.rows, static_cast<const T*>(p.features), p.feature_rows,
        static_cast<const T*>(p.grad_out), p.in_channels, p.out_channels, chunk_rows, partial);
    TG_CUDA_CHECK_LAUNCH();
  }
  sum_chunks<T, Acc>(partials, chunks, n, p.grad_weight, s);
}

// The ConvEpilogueArgs over an output the kernels below stored unmodified (the Hopper kernel
// applies it to its sums itself): one pass, a thread an element.
template <class T, class Acc>
__global__ void conv_epilogue_kernel(T* __restrict__ out, int64_t rows, int64_t cout,
                                     ConvEpilogueArgs epilogue) {
  const auto* residual = static_cast<const T*>(epilogue.residual);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < rows * cout;
       e += int64_t(gridDim.x) * blockDim.x) {
    const Acc skip = residual != nullptr ? widen<Acc>(residual[e]) : Acc(0);
    out[e] = narrow<T>(epilogue.apply(widen<Acc>(out[e]), e % cout, skip));
  }
}

template <class T, class Acc>
void launch_epilogue(const GatherGemm& p, cudaStream_t s) {
  const int64_t n = p.rows * p.out_channels;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 1 << 20));
  conv_epilogue_kernel<T, Acc><<<blocks, 256, 0, s>>>(static_cast<T*>(p.out), p.rows,
                                                      p.out_channels, p.epilogue);
  TG_CUDA_CHECK_LAUNCH();
}

// The CUDA-core kernel where the WMMA one did not run (mma_done), then the epilogue if any.
template <class T, class Acc>
void forward_then_epilogue(const GatherGemm& p, bool mma_done, cudaStream_t s) {
  if (!mma_done) launch_forward<T, Acc>(p, s);
  if (p.epilogue.any()) launch_epilogue<T, Acc>(p, s);
}

}  // namespace

// The sparse_conv request (tilegrid/core/kernel_choice.h) picks the kernels: Auto, Hopper's
// wgmma kernel where it runs and takes the problem, else the WMMA tensor-core tiles, else CUDA
// cores; Portable ("mma"), no Hopper kernel; Simt, CUDA cores only.
void sparse_conv_forward(const GatherGemm& p, int device, Stream stream) {
  if (p.rows == 0 || p.out_channels == 0) return;
  CudaDeviceGuard guard(device);
  const KernelPath kernel = requested_kernel(KernelFamily::SparseConv);
#ifdef TILEGRID_WITH_SM90_CONV
  if (kernel == KernelPath::Auto && hopper_kernels_run_on(KernelFamily::SparseConv, device) &&
      sparse_conv_forward_sm90(p, stream))
    return;
#endif
  const cudaStream_t s = raw(stream);
  const bool mma = kernel != KernelPath::Simt && sparse_conv_forward_mma(p, device, stream);
  switch (p.dtype) {
    case DType::Float64: return forward_then_epilogue<double, double>(p, mma, s);
    case DType::Float32: return forward_then_epilogue<float, float>(p, mma, s);
    case DType::Float16: return forward_then_epilogue<__half, float>(p, mma, s);
    case DType::BFloat16: return forward_then_epilogue<__nv_bfloat16, float>(p, mma, s);
    default: throw TypeError(detail::concat("sparse_conv_forward: unsupported dtype ", p.dtype));
  }
}

void sparse_conv_backward_weight(const WeightGrad& p, int device, Stream stream) {
  if (p.volume * p.in_channels * p.out_channels == 0) return;
  CudaDeviceGuard guard(device);
  const KernelPath kernel = requested_kernel(KernelFamily::SparseConv);
  switch (p.dtype) {
    case DType::Float64: return launch_weight_grad<double, double>(p, device, stream, kernel);
    case DType::Float32: return launch_weight_grad<float, float>(p, device, stream, kernel);
    case DType::Float16: return launch_weight_grad<__half, float>(p, device, stream, kernel);
    case DType::BFloat16: return launch_weight_grad<__nv_bfloat16, float>(p, device, stream, kernel);
    default:
      throw TypeError(detail::concat("sparse_conv_backward_weight: unsupported dtype ", p.dtype));
  }
}

}  // namespace tilegrid::grid::cuda
