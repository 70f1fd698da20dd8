#pragma once
// The end of a dK/dV kernel of the attention backward (internal; the portable and the Hopper
// kernels): a key tile's dK (times the softmax scale) and dV from fp32 accumulators to the
// input type, rows of the sequence only, each pair of neighbouring columns one 32-bit store.
#include <cutlass/array.h>
#include <cute/tensor.hpp>

#include <cstdint>

#include "attention/common/flash_bwd_params.h"

namespace tilegrid::attention::flash_bwd {

// Where a key tile's rows of one gradient begin: out (g.dk or g.dv, which share dK's strides)
// at sequence b, token first_key, K/V head head_kv.
template <class Element>
__device__ __forceinline__ Element* key_tile_start(const FlashBwdParams& g, void* out, int b,
                                                   int64_t first_key, int head_kv) {
  return static_cast<Element*>(out) + b * g.dk_batch_stride + first_key * g.dk_row_stride +
         head_kv * g.dk_head_stride;
}

// One gradient of a key tile: acc (a thread's accumulators) times factor, as the input type,
// into out (g.dk or g.dv, which share dK's strides). coords: the accumulators' (key row,
// column) tile coordinates, values i and i + 1 (i even) neighbouring columns of one row.
// first_key: the tile's first key as a token index (the sequence's first token plus the
// tile's offset).
template <class Element, class Acc, class Coords>
__device__ __forceinline__ void store_key_rows(const FlashBwdParams& g, void* out, int b,
                                               int64_t first_key, int head_kv, int key_rows,
                                               const Acc& acc, float factor,
                                               const Coords& coords) {
  Element* ptr = key_tile_start<Element>(g, out, b, first_key, head_kv);
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc); i += 2) {
    const int row = cute::get<0>(coords(i)), col = cute::get<1>(coords(i));
    if (row >= key_rows) continue;
    cutlass::AlignedArray<Element, 2> pair;
    pair[0] = Element(acc(i) * factor);
    pair[1] = Element(acc(i + 1) * factor);
    *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(ptr + int64_t(row) * g.dk_row_stride +
                                                          col) = pair;
  }
}

// The same from a gradient's transpose (the Hopper head-dim-split kernel's dK^T and dV^T):
// coords gives each accumulator's (column, key row) tile coordinates, and neighbouring values
// lie in neighbouring rows, so each is a 16-bit store of its own (once a key tile, after its
// last step).
template <class Element, class Acc, class Coords>
__device__ __forceinline__ void store_key_columns(const FlashBwdParams& g, void* out, int b,
                                                  int64_t first_key, int head_kv, int key_rows,
                                                  const Acc& acc, float factor,
                                                  const Coords& coords) {
  Element* ptr = key_tile_start<Element>(g, out, b, first_key, head_kv);
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc); ++i) {
    const int col = cute::get<0>(coords(i)), row = cute::get<1>(coords(i));
    if (row < key_rows) ptr[int64_t(row) * g.dk_row_stride + col] = Element(acc(i) * factor);
  }
}

// Both: dK times the softmax scale, and dV.
template <class Element, class Acc, class Coords>
__device__ __forceinline__ void store_dk_dv(const FlashBwdParams& g, int b, int64_t first_key,
                                            int head_kv, int key_rows, const Acc& acc_dk,
                                            const Acc& acc_dv, const Coords& coords) {
  store_key_rows<Element>(g, g.dk, b, first_key, head_kv, key_rows, acc_dk, g.scale, coords);
  store_key_rows<Element>(g, g.dv, b, first_key, head_kv, key_rows, acc_dv, 1.f, coords);
}

}  // namespace tilegrid::attention::flash_bwd
