#include "core/cuda_copy.h"

#include <cstring>

#include "core/cuda_check.h"
#include "tilegrid/core/error.h"

namespace tilegrid::cuda {
namespace {

struct SmallBytes {
  unsigned char bytes[kSmallCopyBytes];
  unsigned int count;
};

__global__ void write_small_bytes(unsigned char* __restrict__ dst, const SmallBytes src) {
  for (unsigned int i = threadIdx.x; i < src.count; i += blockDim.x) dst[i] = src.bytes[i];
}

}  // namespace

void copy_to_host(void* dst, const void* src, size_t nbytes, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
}

void copy_small_to_device(void* dst, const void* src, size_t nbytes, int device, Stream stream) {
  TG_CHECK(nbytes <= kSmallCopyBytes, "copy_small_to_device: at most ", kSmallCopyBytes,
           " bytes, got ", nbytes);
  if (nbytes == 0) return;
  SmallBytes arg;
  std::memcpy(arg.bytes, src, nbytes);
  arg.count = static_cast<unsigned int>(nbytes);
  CudaDeviceGuard guard(device);
  write_small_bytes<<<1, 256, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      static_cast<unsigned char*>(dst), arg);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tilegrid::cuda
