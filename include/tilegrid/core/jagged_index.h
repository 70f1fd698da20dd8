#pragma once
// Which tensor of a jagged batch holds a row (host/device code).
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid {

// The last b with joffsets[b] <= row, by binary search over joffsets [num_tensors + 1]; empty
// tensors (equal consecutive offsets) are skipped because the search takes the last such b.
TG_HOST_DEVICE int64_t tensor_of_row(const int64_t* joffsets, int64_t num_tensors, int64_t row) {
  int64_t lo = 0, hi = num_tensors - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (joffsets[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace tilegrid
