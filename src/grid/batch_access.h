#pragma once
// Small host/device pieces the grid's per-ray and per-voxel code shares (internal): reading
// and writing float32 or float64 data as double (the ops take either dtype and compute in
// double), and which grid of a batch a row belongs to.
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::grid {

TG_HOST_DEVICE double load_real(const void* data, bool float64, int64_t i) {
  return float64 ? static_cast<const double*>(data)[i] : double(static_cast<const float*>(data)[i]);
}

TG_HOST_DEVICE void store_real(void* data, bool float64, int64_t i, double v) {
  if (float64)
    static_cast<double*>(data)[i] = v;
  else
    static_cast<float*>(data)[i] = float(v);
}

// The b with offsets[b] <= row < offsets[b + 1] (offsets: [num_groups + 1], non-decreasing;
// the last such b where groups are empty).
TG_HOST_DEVICE int64_t group_of(const int64_t* offsets, int64_t num_groups, int64_t row) {
  int64_t lo = 0, hi = num_groups;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace tilegrid::grid
