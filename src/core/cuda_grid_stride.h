#pragma once
// The launch size of a grid-stride loop (internal; the kernels of src/grid): enough blocks of
// `per_block` items to cover n, at most 2^20 (each thread's loop strides over the rest), and at
// least 1, since a launch of 0 blocks is an error while a loop over 0 items does nothing.
#include <algorithm>
#include <cstdint>

namespace tilegrid {

inline unsigned grid_stride_blocks(int64_t n, int per_block) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + per_block - 1) / per_block, 1 << 20)));
}

}  // namespace tilegrid
