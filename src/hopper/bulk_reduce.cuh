#pragma once
// Bulk (TMA engine) float32 additions from shared into global memory on Hopper (internal,
// sm_90a): one instruction adds a contiguous run of bytes from shared memory into global
// memory, element by element, atomically per element, without the issuing thread's registers
// or load/store units. A thread commits its additions as a bulk group (cute's
// tma_store_arrive) and waits for them (tma_store_wait, which waits for the shared-memory
// reads only: the buffer may then be reused; the additions land in global memory later and
// are visible to the next kernel on the stream).
#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

namespace tilegrid::hopper {

// dst[i] += src[i] for bytes / 4 floats; dst and src 16-byte aligned, bytes a multiple of 16.
// The writes to src before this call must be made visible to the async proxy first
// (cutlass::arch::fence_view_async_shared() by the threads that wrote them).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src,
                                                    uint32_t bytes) {
#if defined(CUTE_ARCH_TMA_SM90_ENABLED)
  const uint32_t smem = cute::cast_smem_ptr_to_uint(src);
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               :
               : "l"(dst), "r"(smem), "r"(bytes)
               : "memory");
#endif
}

// Waits until at most `kPending` of the bulk groups this thread committed last are unfinished:
// every older group has finished, global writes included.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
#if defined(CUTE_ARCH_TMA_SM90_ENABLED)
  asm volatile("cp.async.bulk.wait_group %0;" : : "n"(kPending) : "memory");
#endif
}

// Waits until every bulk group this thread committed has finished, global writes included.
__device__ __forceinline__ void bulk_wait_all() { bulk_wait_group<0>(); }

// Orders this thread's completed bulk (async proxy) writes to global memory before its later
// generic-proxy operations (a release that hands the data to another CTA).
__device__ __forceinline__ void fence_async_proxy() {
#if defined(CUTE_ARCH_TMA_SM90_ENABLED)
  asm volatile("fence.proxy.async;" : : : "memory");
#endif
}

}  // namespace tilegrid::hopper
