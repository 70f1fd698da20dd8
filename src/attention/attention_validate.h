#pragma once
// Argument checks and the Problem builders shared by the forward and backward entry points
// (internal). Every check names the op and the argument and says what was expected and what
// was given; a Problem is built only from arguments that passed them.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>

#include "attention/attention_problem.h"
#include "tilegrid/attention/attention.h"
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::attention {

using Named = std::pair<const char*, const TensorView*>;

// softmax_scale and softcap finite in float32 (the scores' type), softcap >= 0, windows >= -1.
void check_params(const char* op, const Params& p);

// On CUDA: data 16-byte aligned and strides (but the last, and those of extent-1 dimensions)
// multiples of 8 elements, for 16-byte row loads (cp.async, TMA).
void check_row_loads(const char* op, const char* name, const TensorView& t);

// t has ref's device, dtype and shape, and is contiguous (outputs, gradients).
void check_like(const char* op, const char* name, const TensorView& t, const char* ref_name,
                const TensorView& ref);

// The CUDA kernels' extra requirements on the validated problem (a scale > 0 unless softcap
// is on) and on every tensor given (q first, k second): 16-bit types, 16-byte aligned data and
// strides that are multiples of 8 elements.
void check_cuda_problem(const char* op, const Problem& p, std::initializer_list<Named> tensors);

// Dense batches: q [b, sq, hq, d], k and v [b, sk, hk, d], out like q; lse float32
// [b, hq, sq] when given.
Problem dense_problem(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const std::optional<TensorView>& lse,
                      const Params& params);

// Variable-length batches: q [total_q, hq, d], k and v [total_k, hk, d], out like q; lse
// float32 [hq, total_q] when given; cu_seqlens validated on the host (a device copy waits
// for `stream`).
Problem varlen_problem(const char* op, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& cu_seqlens_q,
                       const TensorView& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                       const TensorView& out, const std::optional<TensorView>& lse,
                       const Params& params, Stream stream);

// The strides of one (batch, token, head) operand; varlen operands have no batch stride.
Operand operand(const TensorView& t, bool varlen);

}  // namespace tilegrid::attention
