// Pooling on the GPU: one thread an (output row, channel) for the forward, an (input row,
// channel) for the backward, over the map's taps (the map or its inverse); consecutive threads
// take consecutive channels, so a warp reads whole feature rows.
#include <algorithm>

#include "core/cuda_check.h"
#include "core/cuda_convert.cuh"
#include "core/cuda_grid_stride.h"
#include "grid/pooling/pooling_cuda.h"

namespace tilegrid::grid::cuda {
namespace {

constexpr int kThreads = 256;

cudaStream_t raw(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}

template <class T>
__device__ __forceinline__ float load(const T* p, int64_t i) {
  return cuda_convert::to_float(p[i]);
}
__device__ __forceinline__ double load(const double* p, int64_t i) {
  return p[i];
}
template <class T, class Acc>
__device__ __forceinline__ void store(T* p, int64_t i, Acc v) {
  if constexpr (std::is_same_v<T, double>)
    p[i] = v;
  else
    p[i] = cuda_convert::from_float<T>(float(v));
}

template <class T, class Acc>
__global__ void max_forward_kernel(PoolProblem p, const T* __restrict__ x, T* __restrict__ out,
                                   int32_t* __restrict__ argmax) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < p.n_out * p.channels;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / p.channels, c = e % p.channels;
    Acc best = 0;
    int32_t from = -1;
    for (int64_t t = 0; t < p.taps; ++t) {
      const int32_t i = p.map[t * p.n_out + o];
      if (i < 0 || i >= p.n_in) continue;
      const Acc v = load(x, int64_t(i) * p.channels + c);
      // The first present tap, a larger value, or a NaN (kept once taken: no v > NaN).
      if (from < 0 || v > best || (v != v && best == best)) {
        best = v;
        from = i;
      }
    }
    store(out, e, from < 0 ? Acc(0) : best);
    argmax[e] = from;
  }
}

template <class T, class Acc>
__global__ void max_backward_kernel(PoolProblem p, const int32_t* __restrict__ argmax,
                                    const T* __restrict__ dy, T* __restrict__ dx) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < p.n_in * p.channels;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / p.channels, c = e % p.channels;
    Acc sum = 0;
    for (int64_t t = 0; t < p.taps; ++t) {
      const int32_t o = p.inverse[t * p.n_in + i];
      if (o < 0 || o >= p.n_out) continue;
      if (argmax[int64_t(o) * p.channels + c] == i) sum += load(dy, int64_t(o) * p.channels + c);
    }
    store(dx, e, sum);
  }
}

// counts[o] = the taps present at o.
__global__ void counts_kernel(PoolProblem p, int32_t* __restrict__ counts) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < p.n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    int32_t n = 0;
    for (int64_t t = 0; t < p.taps; ++t) {
      const int32_t i = p.map[t * p.n_out + o];
      n += i >= 0 && i < p.n_in;
    }
    counts[o] = n;
  }
}

template <class T, class Acc>
__global__ void avg_forward_kernel(PoolProblem p, const T* __restrict__ x, T* __restrict__ out) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < p.n_out * p.channels;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / p.channels, c = e % p.channels;
    Acc sum = 0;
    int n = 0;
    for (int64_t t = 0; t < p.taps; ++t) {
      const int32_t i = p.map[t * p.n_out + o];
      if (i < 0 || i >= p.n_in) continue;
      sum += load(x, int64_t(i) * p.channels + c);
      ++n;
    }
    store(out, e, n > 0 ? sum / Acc(n) : Acc(0));
  }
}

template <class T, class Acc>
__global__ void avg_backward_kernel(PoolProblem p, const int32_t* __restrict__ counts,
                                    const T* __restrict__ dy, T* __restrict__ dx) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < p.n_in * p.channels;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / p.channels, c = e % p.channels;
    Acc sum = 0;
    for (int64_t t = 0; t < p.taps; ++t) {
      const int32_t o = p.inverse[t * p.n_in + i];
      if (o < 0 || o >= p.n_out) continue;
      sum += load(dy, int64_t(o) * p.channels + c) / Acc(counts[o]);
    }
    store(dx, e, sum);
  }
}

// Runs body.template operator()<T, Acc>() for the problem's dtype.
template <class Body>
void by_dtype(DType dtype, const char* op, Body body) {
  switch (dtype) {
    case DType::Float64: return body.template operator()<double, double>();
    case DType::Float32: return body.template operator()<float, float>();
    case DType::Float16: return body.template operator()<__half, float>();
    case DType::BFloat16: return body.template operator()<__nv_bfloat16, float>();
    default: throw TypeError(detail::concat(op, ": unsupported dtype ", dtype));
  }
}

}  // namespace

void max_pool_forward(const PoolProblem& p, const void* features, void* out, int32_t* argmax,
                      int device, Stream stream) {
  if (p.n_out * p.channels == 0) return;
  CudaDeviceGuard guard(device);
  by_dtype(p.dtype, "max_pool_forward", [&]<class T, class Acc>() {
    max_forward_kernel<T, Acc>
        <<<grid_stride_blocks(p.n_out * p.channels, kThreads), kThreads, 0, raw(stream)>>>(
            p, static_cast<const T*>(features), static_cast<T*>(out), argmax);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void max_pool_backward(const PoolProblem& p, const int32_t* argmax, const void* grad_out,
                       void* grad_features, int device, Stream stream) {
  if (p.n_in * p.channels == 0) return;
  CudaDeviceGuard guard(device);
  by_dtype(p.dtype, "max_pool_backward", [&]<class T, class Acc>() {
    max_backward_kernel<T, Acc>
        <<<grid_stride_blocks(p.n_in * p.channels, kThreads), kThreads, 0, raw(stream)>>>(
            p, argmax, static_cast<const T*>(grad_out), static_cast<T*>(grad_features));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool_forward(const PoolProblem& p, const void* features, void* out, int device,
                      Stream stream) {
  if (p.n_out * p.channels == 0) return;
  CudaDeviceGuard guard(device);
  by_dtype(p.dtype, "avg_pool_forward", [&]<class T, class Acc>() {
    avg_forward_kernel<T, Acc>
        <<<grid_stride_blocks(p.n_out * p.channels, kThreads), kThreads, 0, raw(stream)>>>(
            p, static_cast<const T*>(features), static_cast<T*>(out));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool_backward(const PoolProblem& p, const void* grad_out, void* grad_features, int device,
                       Stream stream) {
  if (p.n_in * p.channels == 0) return;
  CudaDeviceGuard guard(device);
  Tensor counts = Tensor::empty({std::max<int64_t>(p.n_out, 1)}, DType::Int32, Device::cuda(device), stream);
  auto* n = static_cast<int32_t*>(counts.data());
  if (p.n_out > 0) {
    counts_kernel<<<grid_stride_blocks(p.n_out, kThreads), kThreads, 0, raw(stream)>>>(p, n);
    TG_CUDA_CHECK_LAUNCH();
  }
  by_dtype(p.dtype, "avg_pool_backward", [&]<class T, class Acc>() {
    avg_backward_kernel<T, Acc>
        <<<grid_stride_blocks(p.n_in * p.channels, kThreads), kThreads, 0, raw(stream)>>>(
            p, n, static_cast<const T*>(grad_out), static_cast<T*>(grad_features));
    TG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tilegrid::grid::cuda
