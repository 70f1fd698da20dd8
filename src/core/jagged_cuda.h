#pragma once
// CUDA parts of JaggedTensor (internal).
#include <cstdint>

#include "tilegrid/core/device.h"

namespace tilegrid::cuda {

void jagged_batch_index(const int64_t* offsets, int64_t num_tensors, int32_t* jidx,
                        int64_t num_rows, int device, Stream stream);

// Whether offsets [n + 1] start at 0, never decrease and end at `total`: one kernel and a
// 4-byte read back (it waits for `stream`), where a copy of every offset to the host took
// milliseconds at a million rays.
bool offsets_valid(const int64_t* offsets, int64_t n, int64_t total, int device, Stream stream);

}  // namespace tilegrid::cuda
