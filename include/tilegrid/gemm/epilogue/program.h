#pragma once
// Epilogue programs: a short sequence of primitives that runs on the float32 accumulator tile
// of out[M, N] = a[M, K] * b[K, N] before anything is written to memory.
//
// The program sees a value tile v, at first the product [M, N]; each step either transforms
// v (broadcast operands, elementwise and pairwise transforms; a pairwise step may change the
// width W) or reads it into an output (stores, row partials, column sums) and passes it on.
// Example, the forward of a SwiGLU MLP's gate+up projection with its pre-activation saved:
//   Program{{Store{pre_activation}, Glu{Activation::Silu}, Store{h}}}
//
// matmul_epilogue validates a program against a, b and its operands (shapes, dtypes,
// devices), naming the step that is wrong, then runs it. On the CPU it runs unfused: the
// plain product in float64, then each step in float64 - the reference that the fused GPU
// kernels are tested against. On CUDA tensors a program runs fused - its steps composed as a
// CUTLASS epilogue visitor tree over the Hopper GEMM (compute capability 9.0, bfloat16 or
// float16, forward layout) - when its signature is one of the small compiled set; any other program, or
// another GPU, is an error that says which programs exist (never an unfused fallback).
#include <string>
#include <variant>
#include <vector>

#include "tilegrid/core/tensor_view.h"
#include "tilegrid/gemm/epilogue/broadcast.h"
#include "tilegrid/gemm/epilogue/column_reduce.h"
#include "tilegrid/gemm/epilogue/elementwise.h"
#include "tilegrid/gemm/epilogue/pairwise.h"
#include "tilegrid/gemm/epilogue/row_reduce.h"
#include "tilegrid/gemm/epilogue/store.h"
#include "tilegrid/gemm/gemm.h"

namespace tilegrid::epilogue {

using Step = std::variant<PerRow, PerColumn, Scalar, Tile, Elementwise, ElementwiseGrad, Glu,
                          GluGrad, Rope, RowPartials, ColumnSum, Store>;

struct Program {
  std::vector<Step> steps;
};

// The program's steps in words, without operands, e.g.
// "per_column(add, bfloat16) > store(bfloat16) > glu(silu) > store(bfloat16)".
std::string signature(const Program& program);

// The same with every operand of dtype `element` written T, e.g. for bfloat16
// "per_column(add, T) > store(T) > glu(silu) > store(T)": the fused kernels are looked up by
// this signature with `element` the product's a and b dtype.
std::string signature(const Program& program, DType element);

}  // namespace tilegrid::epilogue

namespace tilegrid {

// a, b: as for matmul (gemm.h). The program's outputs are written; it needs at least one.
void matmul_epilogue(const TensorView& a, const TensorView& b, const epilogue::Program& program,
                     Stream stream = {});

}  // namespace tilegrid
