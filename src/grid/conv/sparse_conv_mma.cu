// Sparse convolution GEMMs on tensor cores (sm_80 and newer; float16 and bfloat16 with float32
// sums, and float32 multiplied as TF32 when the caller allows it): the same output-stationary
// dataflow as sparse_conv.cu, with the tiles multiplied by WMMA fragments (16x16x16; 16x16x8
// for TF32) instead of CUDA-core FMAs.
//
// Forward / input gradient: a block owns 128 output rows x 64 output channels (8 warps, each
// 32 x 32 = 2 x 2 fragments). For each tap with any of the block's rows present it gathers 32
// channels of the 128 input rows (16-byte loads; zeros for absent rows) and the tap's 32 x 64
// weight slice into shared memory, then the warps multiply. The input gradient reads the weight
// transposed: the slice is loaded as [64 out][32 in] and used as a column-major operand.
// Weight gradient: a block owns a 64 x 64 tile of one tap's weight and a fixed chunk of output
// rows; A = the gathered features (rows x C_in, used transposed: column-major), B = grad_out;
// float32 partials per chunk are summed in order by the caller's second kernel.
// Both need channel counts that are multiples of 8 (16-byte rows for every dtype); other shapes,
// float64, and float32 without allow_tf32 take the CUDA-core kernels.
#include <mma.h>

#include <type_traits>

#include "core/cuda_check.h"
#include "grid/conv/conv_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

using namespace nvcuda;

constexpr int kThreads = 256;
constexpr int kPad = 8;  // elements of padding a shared row: rows start on different banks

// One 16-byte vector: 8 elements of a 16-bit type, 4 of float32.
template <class T>
constexpr int kVec = 16 / int(sizeof(T));

template <class T>
__device__ __forceinline__ uint4 load_vector(const T* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// The WMMA operand type and K depth of a fragment for element type T: 16-bit types multiply
// 16x16x16 fragments; float32 multiplies as TF32 (10 mantissa bits, float32's range, as
// cuDNN's convolutions do when torch.backends.cudnn.allow_tf32 is set) in 16x16x8 fragments.
template <class T>
struct MmaOperand {
  using Type = T;
  static constexpr int kK = 16;
};
template <>
struct MmaOperand<float> {
  using Type = nvcuda::wmma::precision::tf32;
  static constexpr int kK = 8;
};

// A float32 operand fragment is rounded to TF32 after its load (the tensor cores would
// otherwise truncate the low mantissa bits); 16-bit fragments are used as loaded.
template <class T, class Fragment>
__device__ __forceinline__ void to_operand(Fragment& f) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
  }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TG_MMA_ENABLED 1
#endif

// ----- forward / input gradient ----------------------------------------------------------------
constexpr int kRows = 128, kCols = 64, kDepth = 32;

template <class T, bool kTransposedWeight>
__global__ void __launch_bounds__(kThreads)
    gather_gemm_mma_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t rows,
                           const T* __restrict__ features, int64_t feature_rows,
                           const T* __restrict__ weight, int64_t cin, int64_t cout,
                           T* __restrict__ out) {
#ifdef TG_MMA_ENABLED
  // A [128][32 + pad], B [32][64 + pad] (or [64][32 + pad] transposed); reused as the float
  // staging tile [128][64 + 4] for the epilogue (34.8 KB, the largest use, float32's A + B
  // being 30 KB).
  using Mma = MmaOperand<T>;
  constexpr int kV = kVec<T>, kSize = int(sizeof(T));
  constexpr int kLdA = kDepth + kPad, kLdB = kTransposedWeight ? kDepth + kPad : kCols + kPad;
  constexpr int kBBytes = (kTransposedWeight ? kCols * kLdB : kDepth * kLdB) * kSize;
  constexpr int kLdC = kCols + 4;
  constexpr int kABytes = kRows * kLdA * kSize;
  constexpr int kBytes = (kABytes + kBBytes) > kRows * kLdC * 4 ? (kABytes + kBBytes) : kRows * kLdC * 4;
  __shared__ __align__(128) unsigned char smem[kBytes];
  __shared__ int32_t in_rows[kRows];
  T* a_tile = reinterpret_cast<T*>(smem);
  T* b_tile = a_tile + kRows * kLdA;
  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = warp / 2, wn = warp % 2;  // 4 x 2 warps, 32 x 32 each
  const int64_t row0 = int64_t(blockIdx.x) * kRows, col0 = int64_t(blockIdx.y) * kCols;
  wmma::fragment<wmma::accumulator, 16, 16, Mma::kK, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t t = 0; t < volume; ++t) {
    int present = 0;
    if (tid < kRows) {
      const int64_t r = row0 + tid;
      int32_t n = r < rows ? map[t * rows + r] : -1;
      if (n >= feature_rows) n = -1;
      in_rows[tid] = n;
      present = n >= 0;
    }
    if (!__syncthreads_or(present)) continue;
    for (int64_t k0 = 0; k0 < cin; k0 += kDepth) {
      // A: 128 rows x 32 channels in 16-byte vectors (8 channels, 4 for float32).
      for (int e = tid; e < kRows * (kDepth / kV); e += kThreads) {
        const int r = e / (kDepth / kV), v = e % (kDepth / kV);
        const int32_t n = in_rows[r];
        const int64_t k = k0 + v * kV;
        *reinterpret_cast<uint4*>(a_tile + r * kLdA + v * kV) =
            (n >= 0 && k < cin) ? load_vector(features + n * cin + k) : zero;
      }
      if constexpr (!kTransposedWeight) {
        // B: 32 weight rows (input channels) x 64 output channels in vectors.
        for (int e = tid; e < kDepth * (kCols / kV); e += kThreads) {
          const int kk = e / (kCols / kV), v = e % (kCols / kV);
          const int64_t k = k0 + kk, c = col0 + v * kV;
          *reinterpret_cast<uint4*>(b_tile + kk * kLdB + v * kV) =
              (k < cin && c < cout) ? load_vector(weight + (t * cin + k) * cout + c) : zero;
        }
      } else {
        // weight[t] is [cout][cin]: 64 output-channel rows x 32 input channels in vectors.
        for (int e = tid; e < kCols * (kDepth / kV); e += kThreads) {
          const int c = e / (kDepth / kV), v = e % (kDepth / kV);
          const int64_t k = k0 + v * kV, col = col0 + c;
          *reinterpret_cast<uint4*>(b_tile + c * kLdB + v * kV) =
              (k < cin && col < cout) ? load_vector(weight + (t * cout + col) * cin + k) : zero;
        }
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kDepth; kk += Mma::kK) {
        wmma::fragment<wmma::matrix_a, 16, 16, Mma::kK, typename Mma::Type, wmma::row_major> a[2];
        using BLayout = std::conditional_t<kTransposedWeight, wmma::col_major, wmma::row_major>;
        wmma::fragment<wmma::matrix_b, 16, 16, Mma::kK, typename Mma::Type, BLayout> b[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          wmma::load_matrix_sync(a[i], a_tile + (wm * 32 + i * 16) * kLdA + kk, kLdA);
          to_operand<T>(a[i]);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int c = wn * 32 + j * 16;
          wmma::load_matrix_sync(b[j], kTransposedWeight ? b_tile + c * kLdB + kk : b_tile + kk * kLdB + c, kLdB);
          to_operand<T>(b[j]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
      __syncthreads();
    }
  }
  // Epilogue: fragments -> float tile in shared memory -> rounded, coalesced stores.
  float* c_tile = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(c_tile + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[i][j], kLdC,
                              wmma::mem_row_major);
  __syncthreads();
  for (int e = tid; e < kRows * kCols; e += kThreads) {
    const int r = e / kCols, c = e % kCols;
    if (row0 + r < rows && col0 + c < cout)
      out[(row0 + r) * cout + col0 + c] = T(c_tile[r * kLdC + c]);
  }
#endif
}

// ----- weight gradient -------------------------------------------------------------------------
constexpr int kTile = 64, kStep = 32;

template <class T>
__global__ void __launch_bounds__(kThreads)
    weight_grad_mma_kernel(const int32_t* __restrict__ map, int64_t volume, int64_t rows,
                           const T* __restrict__ features, int64_t feature_rows,
                           const T* __restrict__ grad_out, int64_t cin, int64_t cout,
                           int64_t chunk_rows, float* __restrict__ partials) {
#ifdef TG_MMA_ENABLED
  using Mma = MmaOperand<T>;
  constexpr int kV = kVec<T>;
  constexpr int kLd = kTile + kPad, kLdC = kTile + 4;
  constexpr int kABBytes = 2 * kStep * kLd * int(sizeof(T));  // 18.4 KB for float32
  constexpr int kBytes = kABBytes > kTile * kLdC * 4 ? kABBytes : kTile * kLdC * 4;
  __shared__ __align__(128) unsigned char smem[kBytes];
  __shared__ int32_t in_rows[kStep];
  T* a_tile = reinterpret_cast<T*>(smem);  // [32 rows][64 input channels]
  T* b_tile = a_tile + kStep * kLd;         // [32 rows][64 output channels]
  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = warp / 2, wn = warp % 2;  // 4 x 2 warps, 16 x 32 each
  const int64_t ci0 = int64_t(blockIdx.x) * kTile, co0 = int64_t(blockIdx.y) * kTile;
  const int64_t t = int64_t(blockIdx.z) % volume, chunk = int64_t(blockIdx.z) / volume;
  const int64_t first = chunk * chunk_rows;
  const int64_t last = rows < first + chunk_rows ? rows : first + chunk_rows;
  wmma::fragment<wmma::accumulator, 16, 16, Mma::kK, float> acc[2];
  wmma::fill_fragment(acc[0], 0.0f);
  wmma::fill_fragment(acc[1], 0.0f);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t o0 = first; o0 < last; o0 += kStep) {
    int present = 0;
    if (tid < kStep) {
      const int64_t o = o0 + tid;
      int32_t n = o < last ? map[t * rows + o] : -1;
      if (n >= feature_rows) n = -1;
      in_rows[tid] = n;
      present = n >= 0;
    }
    if (!__syncthreads_or(present)) continue;
    for (int e = tid; e < kStep * (kTile / kV); e += kThreads) {
      const int r = e / (kTile / kV), v = e % (kTile / kV);
      const int32_t n = in_rows[r];
      const int64_t ci = ci0 + v * kV, co = co0 + v * kV;
      *reinterpret_cast<uint4*>(a_tile + r * kLd + v * kV) =
          (n >= 0 && ci < cin) ? load_vector(features + n * cin + ci) : zero;
      // Rows whose input is absent add nothing (their features are zero above).
      *reinterpret_cast<uint4*>(b_tile + r * kLd + v * kV) =
          (n >= 0 && co < cout) ? load_vector(grad_out + (o0 + r) * cout + co) : zero;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; kk += Mma::kK) {
      // A(ci, o) = a_tile[o][ci]: column-major with leading dimension kLd.
      wmma::fragment<wmma::matrix_a, 16, 16, Mma::kK, typename Mma::Type, wmma::col_major> a;
      wmma::load_matrix_sync(a, a_tile + kk * kLd + wm * 16, kLd);
      to_operand<T>(a);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, Mma::kK, typename Mma::Type, wmma::row_major> b;
        wmma::load_matrix_sync(b, b_tile + kk * kLd + wn * 32 + j * 16, kLd);
        to_operand<T>(b);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }
  float* c_tile = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int j = 0; j < 2; ++j)
    wmma::store_matrix_sync(c_tile + (wm * 16) * kLdC + wn * 32 + j * 16, acc[j], kLdC, wmma::mem_row_major);
  __syncthreads();
  float* tile = partials + (chunk * volume + t) * cin * cout;
  for (int e = tid; e < kTile * kTile; e += kThreads) {
    const int r = e / kTile, c = e % kTile;
    if (ci0 + r < cin && co0 + c < cout) tile[(ci0 + r) * cout + co0 + c] = c_tile[r * kLdC + c];
  }
#endif
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool tensor_cores(int device) {
  int major = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

template <class T>
void launch_forward(const GatherGemm& p, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(p.rows, kRows)), unsigned(ceil_div(p.out_channels, kCols)));
  const auto* f = static_cast<const T*>(p.features);
  const auto* w = static_cast<const T*>(p.weight);
  auto* o = static_cast<T*>(p.out);
  if (p.transpose_weight)
    gather_gemm_mma_kernel<T, true><<<grid, kThreads, 0, s>>>(p.map, p.volume, p.rows, f, p.feature_rows, w,
                                                              p.in_channels, p.out_channels, o);
  else
    gather_gemm_mma_kernel<T, false><<<grid, kThreads, 0, s>>>(p.map, p.volume, p.rows, f, p.feature_rows, w,
                                                               p.in_channels, p.out_channels, o);
  TG_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_weight_partials(const WeightGrad& p, int64_t chunks, int64_t chunk_rows, float* partials,
                            cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(p.in_channels, kTile)), unsigned(ceil_div(p.out_channels, kTile)),
                  unsigned(chunks * p.volume));
  weight_grad_mma_kernel<T><<<grid, kThreads, 0, s>>>(
      p.map, p.volume, p.rows, static_cast<const T*>(p.features), p.feature_rows,
      static_cast<const T*>(p.grad_out), p.in_channels, p.out_channels, chunk_rows, partials);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool sparse_conv_forward_mma(const GatherGemm& p, int device, Stream stream) {
  const bool half = p.dtype == DType::Float16, bf16 = p.dtype == DType::BFloat16;
  const bool tf32 = p.dtype == DType::Float32 && p.allow_tf32;
  if (!(half || bf16 || tf32) || p.in_channels % 8 || p.out_channels % 8 || !aligned16(p.features) ||
      !aligned16(p.weight) || !tensor_cores(device))
    return false;
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  if (half)
    launch_forward<__half>(p, s);
  else if (bf16)
    launch_forward<__nv_bfloat16>(p, s);
  else
    launch_forward<float>(p, s);
  return true;
}

bool sparse_conv_weight_partials_mma(const WeightGrad& p, int64_t chunks, int64_t chunk_rows,
                                     float* partials, int device, Stream stream) {
  const bool half = p.dtype == DType::Float16, bf16 = p.dtype == DType::BFloat16;
  const bool tf32 = p.dtype == DType::Float32 && p.allow_tf32;
  if (!(half || bf16 || tf32) || p.in_channels % 8 || p.out_channels % 8 || !aligned16(p.features) ||
      !aligned16(p.grad_out) || !tensor_cores(device))
    return false;
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  if (half)
    launch_weight_partials<__half>(p, chunks, chunk_rows, partials, s);
  else if (bf16)
    launch_weight_partials<__nv_bfloat16>(p, chunks, chunk_rows, partials, s);
  else
    launch_weight_partials<float>(p, chunks, chunk_rows, partials, s);
  return true;
}

}  // namespace tilegrid::grid::cuda
