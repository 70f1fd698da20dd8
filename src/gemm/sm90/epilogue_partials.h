#pragma once
// The finishing steps of the fused programs' reductions (internal; host code, kernels in
// epilogue_partials.cu). CUTLASS's reduction nodes, run without their own final reduction,
// leave one partial per output tile; these turn them into what the program asked for.
#include <cstdint>

#include <cuda_runtime.h>

#include "tilegrid/gemm/epilogue/log_sum_exp_state.h"

namespace tilegrid::gemm::sm90 {

// Row partials: CUTLASS's column reduction node leaves partial t of row i at
// buffer[t * m_pad + i] (m_pad = M rounded up to the 128-row tile); the program's layout is
// partials[i * count + t]. M * count floats (512 KB at M = 8192, N = 4096): a few
// microseconds next to the GEMM.
void transpose_row_partials(const float* buffer, int64_t m, int64_t m_pad, int64_t count,
                            float* partials, cudaStream_t stream);
// The same for running log-sum-exps, each written as its value.
void transpose_row_partials(const epilogue::LogSumExpState* buffer, int64_t m, int64_t m_pad,
                            int64_t count, float* partials, cudaStream_t stream);

// Column sums: sums[j] = the sum over the M tiles t of partials[t * ld + j], in tile order
// (deterministic). At 8192 x 4096: 64 x 4096 partials, 1 MiB read.
void sum_column_partials(const float* partials, int64_t tiles, int64_t ld, int64_t n, float* sums,
                         cudaStream_t stream);

}  // namespace tilegrid::gemm::sm90
