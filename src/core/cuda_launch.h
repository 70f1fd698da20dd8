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

// Opts `kernel` (a __global__ function's address) into `bytes` of dynamic shared memory on the
// current device (more than the default 48 KB), once per kernel, size and device, so that a
// launch inside a stream capture that follows does not set attributes; throws, naming `what`,
// where the GPU allows less.
void allow_dynamic_smem(const void* kernel, int bytes, const char* what);

}  // namespace tilegrid::cuda
