#pragma once
// The CPU evaluator of epilogue programs (internal): the reference for the fused kernels.
#include <cstdint>

#include "gemm/gemm_problem.h"
#include "tilegrid/gemm/epilogue/program.h"

namespace tilegrid::epilogue {

// Runs `program` on the product described by p (a, b and their layout; out is unused),
// unfused: the product in float64, then each step in float64, outputs rounded once.
void evaluate_cpu(const gemm::Problem& p, const Program& program);

void finish_row_partials_cpu(Reduce op, const float* partials, int64_t rows, int64_t count,
                             float* out);

}  // namespace tilegrid::epilogue
