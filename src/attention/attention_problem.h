#pragma once
// An attention problem after validation, shared by the back ends (internal). Sequence b's
// queries are rows q_start[b] .. q_start[b] + q_len[b] of the token dimension (dense inputs:
// batch b's block), likewise for keys.
#include <cstdint>
#include <vector>

#include "tilegrid/core/dtype.h"

namespace tilegrid::attention {

// Head dimensions of the portable kernels (cuda/) and of the Hopper ones (sm90/).
inline constexpr int kHeadDims[] = {64, 96, 128, 192, 256};
inline constexpr int kHopperHeadDims[] = {64, 128, 256};

inline bool is_hopper_head_dim(int64_t head_dim) {
  for (int d : kHopperHeadDims)
    if (head_dim == d) return true;
  return false;
}

struct Operand {
  void* data = nullptr;
  int64_t batch_stride = 0, token_stride = 0, head_stride = 0;  // elements
};

struct Problem {
  DType dtype = DType::BFloat16;
  int64_t batch = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  std::vector<int64_t> q_start, q_len, k_start, k_len;  // per sequence
  Operand q, k, v, out;
  float* lse = nullptr;  // [hq, token] strides below, or null
  int64_t lse_head_stride = 0, lse_token_stride = 0, lse_batch_stride = 0;
  float scale = 0, softcap = 0;
  int64_t window_left = -1, window_right = -1;
  int64_t max_seqlen_q = 0;  // longest sequence of queries
  // Variable-length batches on a GPU: the offsets in device memory, which the kernel reads
  // (the vectors above hold the host copy they were validated from).
  const int32_t* cu_seqlens_q_device = nullptr;
  const int32_t* cu_seqlens_k_device = nullptr;
};

// The backward's own operands, beside the forward's Problem (whose out and lse it reads):
// dout like out, and the gradients dq, dk, dv (contiguous, like q, k and v).
struct Gradients {
  Operand dout, dq, dk, dv;
  const float* dlse = nullptr;  // lse's strides, or null
  bool deterministic = false;
};

void forward_cpu(const Problem& p);
void backward_cpu(const Problem& p, const Gradients& g);

// set_sm90_switches' value (-1: the default variant).
int sm90_switches();
void set_last_cuda_kernel(const char* name);

}  // namespace tilegrid::attention
