#pragma once
// CUDA back end of the epilogue programs (internal).
#include <cstdint>

#include "tilegrid/core/device.h"
#include "tilegrid/gemm/epilogue/row_reduce.h"

namespace tilegrid::epilogue {

// One thread a row combines its `count` partials (a few dozen: N / tile_n).
void finish_row_partials_cuda(Reduce op, const float* partials, int64_t rows, int64_t count,
                              float* out, int device, Stream stream);

}  // namespace tilegrid::epilogue
