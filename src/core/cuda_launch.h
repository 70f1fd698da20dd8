#pragma once
// Launch-configuration queries, cached (internal). Each CUDA query costs microseconds; made on
// every call they showed up in the time of small ops, so each is answered once per device
// (and per kernel, block size and shared-memory size where it depends on those).
#include <cstddef>

namespace tilegrid::cuda {

int multiprocessor_count(int device);

// major * 10 + minor, e.g. 90 for an H100/H200.
int compute_capability(int device);

// Blocks of `kernel` (a __global__ function's address) resident on one SM at once.
int max_active_blocks(const void* kernel, int threads, size_t dynamic_smem, int device);

}  // namespace tilegrid::cuda
