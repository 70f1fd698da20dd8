#pragma once
// The end of a dK/dV kernel of the attention backward (internal; the portable and the Hopper
// kernels): a key tile's dK (times the softmax scale) and dV from fp32 accumulators to the
// input type, rows of the sequence only, each pair of neighbouring columns one 32-bit store.
#include <cutlass/array.h>
#include <cute/tensor.hpp>

#include <cstdint>

#include "attention/cuda/flash_bwd_params.h"

namespace tilegrid::attention::flash_bwd {

// acc_dk, acc_dv: a thread's accumulators; coords: their (key row, column) tile coordinates,
// values i and i + 1 (i even) neighbouring columns of one row. first_key: the tile's first
// key as a token index (the sequence's first token plus the tile's offset).
template <class Element, class Acc, class Coords>
__device__ __forceinline__ void store_dk_dv(const FlashBwdParams& g, int b, int64_t first_key,
                                            int head_kv, int key_rows, const Acc& acc_dk,
                                            const Acc& acc_dv, const Coords& coords) {
  auto* dk_ptr = static_cast<Element*>(g.dk) + b * g.dk_batch_stride +
                 first_key * g.dk_row_stride + head_kv * g.dk_head_stride;
  auto* dv_ptr = static_cast<Element*>(g.dv) + b * g.dk_batch_stride +
                 first_key * g.dk_row_stride + head_kv * g.dk_head_stride;
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc_dk); i += 2) {
    const int row = cute::get<0>(coords(i)), col = cute::get<1>(coords(i));
    if (row >= key_rows) continue;
    cutlass::AlignedArray<Element, 2> dk_pair, dv_pair;
    dk_pair[0] = Element(acc_dk(i) * g.scale);
    dk_pair[1] = Element(acc_dk(i + 1) * g.scale);
    dv_pair[0] = Element(acc_dv(i));
    dv_pair[1] = Element(acc_dv(i + 1));
    const int64_t at = int64_t(row) * g.dk_row_stride + col;
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(dk_ptr + at) = dk_pair;
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(dv_ptr + at) = dv_pair;
  }
}

}  // namespace tilegrid::attention::flash_bwd
