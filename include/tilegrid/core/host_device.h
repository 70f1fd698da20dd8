#pragma once
// TG_HOST_DEVICE marks code that runs on the CPU and on the GPU, so that the CPU reference and
// the CUDA kernels execute the same lines (tree traversal, sampling weights...).
#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TG_HOST_DEVICE inline
#endif
