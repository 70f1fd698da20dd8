#pragma once
// CUDA parts of JaggedTensor (internal).
#include <cstdint>

#include "tilegrid/core/device.h"

namespace tilegrid::cuda {

void jagged_batch_index(const int64_t* offsets, int64_t num_tensors, int32_t* jidx,
                        int64_t num_rows, int device, Stream stream);
void copy_to_host(void* dst, const void* src, size_t nbytes, int device, Stream stream);

}  // namespace tilegrid::cuda
