#pragma once
// Where sequence b of a batch lies (internal; CUDA code): the first token and the length of
// its queries and of its keys. A dense batch's sequences all have seqlen_q / seqlen_k tokens
// from token 0 of their own batch entry; a variable-length batch's are windows of one token
// dimension, from cu_seqlens_q[b] / cu_seqlens_k[b]. Params: FlashFwdParams.
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::attention {

struct Sequence {
  int64_t q0, sq, k0, sk;  // first token and length of the queries and of the keys
};

template <class Params>
TG_HOST_DEVICE Sequence sequence(const Params& p, int b) {
  if (p.cu_seqlens_q != nullptr) {
    const int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    return {q0, p.cu_seqlens_q[b + 1] - q0, k0, p.cu_seqlens_k[b + 1] - k0};
  }
  return {0, p.seqlen_q, 0, p.seqlen_k};
}

}  // namespace tilegrid::attention
