#pragma once
// The fused epilogue programs compiled for the sm_90a GEMM (internal; host code may include
// this without CUTLASS). A program runs fused when its signature() is one of
// fused_program_signatures(); anything else is an error that lists them (no unfused
// fallback on the GPU: a program that silently ran as several kernels would hide the cost
// the fusion exists to remove). Every fused program is compiled for bfloat16 a and b with
// the cooperative 128x256x64 kernel (glu_grad: the ping-pong 128x128 one) in one layout: the forward programs in the forward
// layout (a [M, K] row-major, b = w^T of a row-major w [N, K]), the backward ones (glu_grad,
// elementwise_grad) in the data-gradient layout (b = w, [K, N] row-major), where their
// products are. One file epilogue_<name>.cu per program (the glu ones hold the silu and the
// gelu_tanh kernel), compiled in three unity units epilogue_batch_<family>.cu: a new program
// goes into one of them.
#include <string>
#include <vector>

#include "gemm/gemm_problem.h"
#include "tilegrid/core/device.h"
#include "tilegrid/core/tensor_view.h"
#include "tilegrid/gemm/epilogue/program.h"

namespace tilegrid::gemm::sm90 {

// The N tile of the fused kernels: RowPartials steps must use it as their tile_n.
constexpr int64_t kFusedTileN = 256;

// The row stride TMA is given for an [M, N] matrix operand: its own, except when it has at
// most one row, where torch may report any stride (e.g. 1) and the stride is never used to
// step; N rounded up to 8 then keeps the descriptor's 16-byte stride rule.
inline int64_t tma_row_stride(const TensorView& t) {
  return t.shape[0] <= 1 ? (t.shape[1] + 7) / 8 * 8 : t.strides[0];
}

// Runs `program` (validated by matmul_epilogue) on the product p on `device`, a compute
// capability 9.0 GPU; raises a ValueError naming the compiled programs when it has no kernel,
// and one naming the constraint when the kernels cannot take p or an operand.
void run_fused_program(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream);

std::vector<std::string> fused_program_signatures();

// The launchers, one per translation unit; the operands are those of `program`, whose
// signature matched.
void run_bias_gelu_aux(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream);
void run_row_scale(const Problem& p, const epilogue::Program& program, int device, Stream stream);
void run_residual_sum_squares(const Problem& p, const epilogue::Program& program, int device,
                              Stream stream);
void run_rope(const Problem& p, const epilogue::Program& program, int device, Stream stream);
void run_glu(const Problem& p, const epilogue::Program& program, int device, Stream stream);
void run_store_glu(const Problem& p, const epilogue::Program& program, int device,
                   Stream stream);
void run_store_column_sum(const Problem& p, const epilogue::Program& program, int device,
                          Stream stream);
void run_scalar(const Problem& p, const epilogue::Program& program, int device, Stream stream);
void run_store_row_sum(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream);
void run_store_row_max(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream);
void run_store_row_logsumexp(const Problem& p, const epilogue::Program& program, int device,
                             Stream stream);
void run_glu_grad(const Problem& p, const epilogue::Program& program, int device,
                  Stream stream);
void run_gelu_grad_column_sum(const Problem& p, const epilogue::Program& program, int device,
                              Stream stream);

}  // namespace tilegrid::gemm::sm90
