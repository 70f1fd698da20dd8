#pragma once
// What the glu programs share (internal, sm_90a; programs/glu.cu, programs/store_glu.cu): the
// GEMM whose D is the halved output's bytes (GluAsBytes in epilogue_programs.cuh), and its
// launcher with the output's checks.
#include "core/cuda_check.h"
#include "gemm/sm90/epilogue_programs.cuh"
#include "tilegrid/core/error.h"

namespace tilegrid::gemm::sm90::programs {

// The GEMM of a glu program: D as int8 (the result's bytes).
template <class Element, class Program>
using FusedGluGemm = FusedGemm<Element, Program, ForwardB, int8_t>;

template <class Element, class Program>
void run_glu_gemm(const Problem& p, const TensorView& out,
                  const typename FusedGluGemm<Element, Program>::Callbacks::Arguments& args,
                  int device, Stream stream) {
  // D is N bytes a row, stored with 16-byte TMA rows: N / 2 results a multiple of 8.
  TG_CHECK_VALUE(p.n % 16 == 0, "matmul_epilogue: the fused glu kernels need N to be a "
                 "multiple of 16 (output rows of N / 2 a multiple of 8), got N=", p.n);
  CudaDeviceGuard guard(device);
  launch<FusedGluGemm<Element, Program>>(with_glu_output(p, out), args, device,
                                static_cast<cudaStream_t>(stream.handle));
}

}  // namespace tilegrid::gemm::sm90::programs
