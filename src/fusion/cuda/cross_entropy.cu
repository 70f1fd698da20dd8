// Cross-entropy rows on CUDA: one block a row, two passes over it. Memory-bound: at a Llama-3
// LM head (V = 128256, bfloat16) a row is 250 KB, more than a block's shared memory, so the row
// is read twice and written once, 6 bytes an element (the second read may partly hit L2; not
// measured apart from the linear cross-entropy it serves):
//  - pass 1 keeps a running maximum and sum of exponentials per thread (exp(x - max) as
//    ex2((x - max) log2 e): one subtract, one multiply and one ex2 an element, one rescale a
//    vector), combined over the block;
//  - pass 2 writes (exp(x - lse) - [column == target]) * scale over the row.
// Differences are taken on the logits as they are, before any scaling and before the log of
// the sum is added: the loss is (max - x_t) + log(sum) and the probabilities
// exp((x - max) - log(sum)), as torch's log_softmax forms them. Near a logit of 1e15 an ulp in
// float32 is 6.7e7, and 1.3e8 once scaled by log2(e): scaling each logit first would round it
// by up to half the latter, and max + log(sum) would lose log(sum) altogether. x - max is
// exact for logits within a factor of 2 of each other (Sterbenz).
// Each thread reads 16-byte vectors, kUnroll of them in flight, so that a block keeps several
// loads outstanding (the loop-carried maximum would otherwise serialize them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/cuda_convert.cuh"
#include "fusion/cross_entropy_cuda.h"

namespace tilegrid::cross_entropy {
namespace {

using cuda_convert::from_float;
using cuda_convert::to_float;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxThreads = 512;
constexpr int kUnroll = 4;

template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// A running (maximum, sum of exp(x - maximum)) pair, the maximum in the logits' units. A NaN logit makes the sum
// NaN, and the row's loss and gradient with it, as on the CPU and in torch: fmaxf skips NaN,
// so the maximum stays finite (or -inf) and the NaN is carried by the sum.
struct MaxSum {
  float max = -INFINITY, sum = 0.f;

  __device__ __forceinline__ void add(const MaxSum& o) {
    const float m = fmaxf(max, o.max);
    if (m == -INFINITY) {  // both empty so far: their sums are 0, or NaN after a NaN logit
      sum += o.sum;
      return;
    }
    sum = sum * exp2f((max - m) * kLog2e) + o.sum * exp2f((o.max - m) * kLog2e);
    max = m;
  }
};

// Adds VEC logits to the running pair: one rescale a vector.
template <int VEC>
__device__ __forceinline__ void add_vector(MaxSum& ms, const float (&x)[VEC]) {
  float vmax = x[0];
#pragma unroll
  for (int k = 1; k < VEC; ++k) vmax = fmaxf(vmax, x[k]);
  const float m = fmaxf(ms.max, vmax);
  if (m == -INFINITY) {  // -inf and NaN logits only so far: keep a NaN in the sum
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (isnan(x[k])) ms.sum = NAN;
    return;
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += exp2f((x[k] - m) * kLog2e);
  ms.sum = ms.sum * exp2f((ms.max - m) * kLog2e) + s;
  ms.max = m;
}

// The block's combined pair, in every thread. One barrier before the read of the warps' pairs.
__device__ __forceinline__ MaxSum block_max_sum(MaxSum ms, MaxSum* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum o;
    o.max = __shfl_xor_sync(0xffffffffu, ms.max, offset);
    o.sum = __shfl_xor_sync(0xffffffffu, ms.sum, offset);
    ms.add(o);
  }
  const int warps = blockDim.x / 32;
  if (warps == 1) return ms;
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = ms;
  __syncthreads();
  MaxSum total = scratch[0];
  for (int w = 1; w < warps; ++w) total.add(scratch[w]);
  return total;
}

template <class T, int VEC>
__device__ __forceinline__ void load_floats(const T* p, float (&x)[VEC]) {
  const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
  for (int k = 0; k < VEC; ++k) x[k] = to_float(v.v[k]);
}

// VEC elements a vector when the row and its length allow 16-byte accesses, else 1.
template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads) loss_and_grad_kernel(Params p) {
  __shared__ MaxSum scratch[kMaxThreads / 32];
  const int64_t r = blockIdx.x;
  T* row = static_cast<T*>(p.logits) + r * p.row_stride;
  const int64_t t = p.target[r];
  const int64_t vectors = p.vocab / VEC;
  const int64_t step = blockDim.x;

  if (t == p.ignore_index) {  // no loss, a zero gradient
    if (threadIdx.x == 0) p.loss[r] = 0.f;
    if (p.grad_scale == nullptr) return;
    Vec<T, VEC> zero;
#pragma unroll
    for (int k = 0; k < VEC; ++k) zero.v[k] = from_float<T>(0.f);
    for (int64_t i = threadIdx.x; i < vectors; i += step)
      *reinterpret_cast<Vec<T, VEC>*>(row + i * VEC) = zero;
    return;
  }

  // Pass 1: kUnroll vectors loaded before any is used, then the rest one at a time.
  MaxSum ms;
  int64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * step < vectors; i += kUnroll * step) {
    float x[kUnroll][VEC];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_floats<T, VEC>(row + (i + u * step) * VEC, x[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) add_vector<VEC>(ms, x[u]);
  }
  for (; i < vectors; i += step) {
    float x[VEC];
    load_floats<T, VEC>(row + i * VEC, x);
    add_vector<VEC>(ms, x);
  }
  const MaxSum total = block_max_sum(ms, scratch);
  const float log2_sum = log2f(total.sum);  // log2 of the row's sum of exp(x - max)
  const bool in_range = t >= 0 && t < p.vocab;
  // A target at the row's maximum gives max - x_t = 0 exactly: a row whose target is far
  // above the rest gets a loss of exactly 0.
  if (threadIdx.x == 0)
    p.loss[r] = in_range ? (total.max - to_float(row[t])) + log2_sum * kLn2 : NAN;
  if (p.grad_scale == nullptr) return;
  // Every thread has read its own elements and row[t] is read above by thread 0 before the
  // barrier below, which orders it before pass 2 overwrites it.
  __syncthreads();

  const float scale = *p.grad_scale;
  for (int64_t j = threadIdx.x; j < vectors; j += step) {
    float x[VEC];
    load_floats<T, VEC>(row + j * VEC, x);
    Vec<T, VEC> g;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float onehot = (j * VEC + k == t) ? scale : 0.f;
      g.v[k] = from_float<T>(exp2f((x[k] - total.max) * kLog2e - log2_sum) * scale - onehot);
    }
    *reinterpret_cast<Vec<T, VEC>*>(row + j * VEC) = g;
  }
}

template <class T>
void launch(const Params& p, Stream stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = p.vocab % kVec == 0 && p.row_stride % kVec == 0 &&
                          reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  const int64_t vectors = vectorized ? p.vocab / kVec : p.vocab;
  // Enough threads for kUnroll vectors each, a multiple of 32, at most kMaxThreads.
  const int64_t wanted = (vectors + kUnroll - 1) / kUnroll;
  const int threads =
      int(std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, (wanted + 31) / 32 * 32)));
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (vectorized)
    loss_and_grad_kernel<T, kVec><<<dim3(unsigned(p.rows)), threads, 0, s>>>(p);
  else
    loss_and_grad_kernel<T, 1><<<dim3(unsigned(p.rows)), threads, 0, s>>>(p);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void loss_and_grad_cuda(const Params& p, int device, Stream stream) {
  TG_CHECK_VALUE(p.rows <= 0x7fffffff, "cross_entropy_loss_and_grad: at most 2^31 - 1 rows, got ",
                 p.rows);
  CudaDeviceGuard guard(device);
  switch (p.dtype) {
    case DType::Float32:
      return launch<float>(p, stream);
    case DType::Float16:
      return launch<__half>(p, stream);
    default:
      return launch<__nv_bfloat16>(p, stream);
  }
}

}  // namespace tilegrid::cross_entropy
