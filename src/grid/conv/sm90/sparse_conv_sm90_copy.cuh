#pragma once
// The 16-byte gather copy of the Hopper sparse convolution kernels (sm_80 and newer PTX).
#include <cute/arch/util.hpp>

#include <cstdint>

namespace tilegrid::grid::sm90 {

// 16 bytes global -> shared, bypassing L1; valid = false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = cute::cast_smem_ptr_to_uint(smem);
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}

}  // namespace tilegrid::grid::sm90
