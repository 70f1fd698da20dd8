// Attention over a KV cache for head dimension 64 (bfloat16 and float16).
#include "attention/cuda/flash_decode_launch.cuh"

namespace tilegrid::attention {

void decode_cuda_hdim64(const FlashDecodeParams& p, DType dtype, Stream stream) {
  flash::launch_decode<64>(p, dtype, stream);
}

}  // namespace tilegrid::attention
