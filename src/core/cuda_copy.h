#pragma once
// Copies between the host and a CUDA device (internal).
#include <cstddef>

#include "tilegrid/core/device.h"

namespace tilegrid::cuda {

// Copies nbytes from the device to the host and waits for `stream` (the host reads dst next).
void copy_to_host(void* dst, const void* src, size_t nbytes, int device, Stream stream);

// The most bytes copy_small_to_device takes: kernel arguments hold at most 4 KB.
constexpr size_t kSmallCopyBytes = 4000;

// Copies nbytes <= kSmallCopyBytes of host memory to the device in stream order, as the
// argument of a one-block kernel: src is read before the call returns and nothing waits.
// (cudaMemcpyAsync from pageable memory may wait for the stream first, and the source must
// then outlive the copy: each grid a network derives waited on its transforms so.)
void copy_small_to_device(void* dst, const void* src, size_t nbytes, int device, Stream stream);

}  // namespace tilegrid::cuda
