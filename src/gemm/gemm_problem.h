#pragma once
// A validated matrix product out[M, N] = a[M, K] * b[K, N], shared by the front end and the
// CPU, portable CUDA and sm_90a back ends (internal). Pointers are to the first element;
// leading dimensions are in elements.
#include <cstdint>

#include "tilegrid/core/dtype.h"
#include "tilegrid/core/tensor_view.h"

namespace tilegrid::gemm {

// Which dimension of each operand is contiguous in memory. These are the three products of a
// linear layer y = x * w^T (x [tokens, in], w [out, in], both row-major); the fourth pairing
// (a and b both transposed views) never arises in one and is rejected by the front end.
enum class Layout : uint8_t {
  // a K-contiguous ([M, K] row-major), b K-contiguous ([N, K] row-major, read as its
  // transpose): y = x * w^T.
  Fprop,
  // a K-contiguous, b N-contiguous ([K, N] row-major): dx = dy * w.
  Dgrad,
  // a M-contiguous ([K, M] row-major, read as its transpose), b N-contiguous: dw = dy^T * x.
  Wgrad,
};

struct Problem {
  int64_t m = 0, n = 0, k = 0;
  Layout layout = Layout::Fprop;
  DType dtype = DType::BFloat16;      // a and b
  DType out_dtype = DType::BFloat16;  // a's dtype or float32
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;  // row-major
  // Distance between consecutive rows (K-contiguous) or columns (M/N-contiguous) of a and b,
  // and between rows of out.
  int64_t lda = 0, ldb = 0, ldo = 0;

  bool a_k_contiguous() const { return layout != Layout::Wgrad; }
  bool b_k_contiguous() const { return layout == Layout::Fprop; }
  // Element strides of a(i, kk) and b(kk, j) along their two logical dimensions.
  int64_t a_stride_m() const { return a_k_contiguous() ? lda : 1; }
  int64_t a_stride_k() const { return a_k_contiguous() ? 1 : lda; }
  int64_t b_stride_k() const { return b_k_contiguous() ? 1 : ldb; }
  int64_t b_stride_n() const { return b_k_contiguous() ? ldb : 1; }
};

void matmul_cpu(const Problem& p);

// Checks a and b as matmul does (messages name `op`) and describes their product; out,
// out_dtype and ldo are left to the caller.
Problem check_product(const char* op, const TensorView& a, const TensorView& b);

}  // namespace tilegrid::gemm
