#pragma once
// The fused epilogue programs compiled for the sm_90a GEMM (internal; host code may include
// this without CUTLASS). A program runs fused when its element-generic signature
// (epilogue::signature(program, a's dtype)) is one of the compiled set; anything else is an
// error that lists them (no unfused fallback on the GPU: a program that silently
// ran as several kernels would hide the cost the fusion exists to remove).
//
// A program is one file in programs/: its epilogue visitor tree, its launcher `template
// <DType E> void run_<name>(...)` (E = bfloat16 or float16: a, b and the program's T
// operands), TG_FUSED_LAUNCHER(run_<name>) to compile it for both, and one line a signature
// it runs,
//   TG_FUSED_PROGRAM(run_<name>, Fprop, "rope > store(T)")
// at the start of a line, where Fprop (a [M, K] row-major, b = w^T of a row-major w [N, K])
// or Dgrad (b = w, [K, N] row-major) is the layout of the products it belongs to. The build
// (src/CMakeLists.txt) collects those lines into the registry and compiles the files five
// to a unity unit; adding a program touches no other file.
#include <cstdint>

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

}  // namespace tilegrid::gemm::sm90
