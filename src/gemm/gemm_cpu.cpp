// CPU matmul: the reference the CUDA kernels are tested against, and the CPU fallback.
// float32 accumulation as on the GPU (the order of the additions differs). Blocked so that
// one block of b (kBlockK x N floats) is converted once and reused by kBlockM rows of a; the
// innermost loop runs along N over contiguous floats, which the compiler vectorises.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gemm/gemm_problem.h"
#include "tilegrid/core/element_access.h"
#include "tilegrid/core/half_convert.h"

namespace tilegrid::gemm {
namespace {

constexpr int64_t kBlockM = 32;
constexpr int64_t kBlockK = 256;

// dst[r * cols + c] = float(src[(r0 + r) * stride_r + (c0 + c) * stride_c]) for a block of a
// 16-bit matrix.
void load_block(DType dtype, const void* src, int64_t stride_r, int64_t stride_c, int64_t r0,
                int64_t c0, int64_t rows, int64_t cols, float* dst) {
  const auto* base = static_cast<const uint16_t*>(src);
  const bool bf16 = dtype == DType::BFloat16;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* line = base + (r0 + r) * stride_r + c0 * stride_c;
    float* out = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t h = line[c * stride_c];
      out[c] = bf16 ? bfloat16_to_float(h) : float16_to_float(h);
    }
  }
}

}  // namespace

void matmul_cpu(const Problem& p) {
  std::vector<float> acc(static_cast<size_t>(kBlockM * p.n));
  std::vector<float> a_blk(static_cast<size_t>(kBlockM * kBlockK));
  std::vector<float> b_blk(static_cast<size_t>(std::min(kBlockK, std::max<int64_t>(p.k, 1)) * p.n));
  for (int64_t m0 = 0; m0 < p.m; m0 += kBlockM) {
    const int64_t mb = std::min(kBlockM, p.m - m0);
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t k0 = 0; k0 < p.k; k0 += kBlockK) {
      const int64_t kb = std::min(kBlockK, p.k - k0);
      load_block(p.dtype, p.a, p.a_stride_m(), p.a_stride_k(), m0, k0, mb, kb, a_blk.data());
      load_block(p.dtype, p.b, p.b_stride_k(), p.b_stride_n(), k0, 0, kb, p.n, b_blk.data());
      for (int64_t i = 0; i < mb; ++i) {
        float* row = acc.data() + i * p.n;
        for (int64_t kk = 0; kk < kb; ++kk) {
          const float av = a_blk[i * kb + kk];
          const float* brow = b_blk.data() + kk * p.n;
          for (int64_t j = 0; j < p.n; ++j) row[j] += av * brow[j];
        }
      }
    }
    for (int64_t i = 0; i < mb; ++i)
      for (int64_t j = 0; j < p.n; ++j)
        store_element(p.out_dtype, p.out, (m0 + i) * p.ldo + j, acc[i * p.n + j]);
  }
}

}  // namespace tilegrid::gemm
