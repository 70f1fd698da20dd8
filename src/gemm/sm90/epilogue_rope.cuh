#pragma once
// The rope step of the fused epilogue programs (internal, sm_90a): the rotation of adjacent
// column pairs as a Sm90Compute functor, and the float32 broadcast operands it reads
// (positions per row, frequencies per column), prepared by one small kernel. Shared by the
// programs that end in `rope > store` (programs/rope.cu, programs/bias_rope.cu).
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/cuda_check.h"
#include "gemm/sm90/epilogue_programs.cuh"
#include "tilegrid/core/tensor.h"

namespace tilegrid::gemm::sm90::programs {

// Rotation of adjacent column pairs by angle position[i] * frequency[j]. The fragment lists
// the accumulator registers in wgmma's order, where values 2k and 2k + 1 are columns 2c and
// 2c + 1 of one row, i.e. one pair of the interleaved layout; `frequency` holds each pair's
// frequency at both of its columns (and negated for the inverse rotation).
struct RopeOp {
  template <class Fragment>
  struct Op {
    CUTLASS_DEVICE Fragment operator()(const Fragment& x, const Fragment& position,
                                       const Fragment& frequency) const {
      static_assert(Fragment::kElements % 2 == 0, "column pairs must stay in one fragment");
      Fragment out = x;
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < Fragment::kElements; k += 2)
        epilogue::rotate_pair(out[k], out[k + 1], position[k] * frequency[k]);
      return out;
    }
  };
};

// The broadcast operands the epilogue reads: positions as float32 [M] (any position type of
// the primitive; exact up to 2^24) and one frequency per column [N], each pair's twice and
// negated for the inverse rotation. One pass over M + N values, ~0.1% of the product's time
// at 8192 x 6144.
template <class Position>
__global__ void rope_operands(const Position* positions, int64_t m, const float* frequencies,
                              int64_t n, bool inverse, float* position_out, float* frequency_out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < m) position_out[i] = float(positions[i]);
  if (i < n) frequency_out[i] = inverse ? -frequencies[i / 2] : frequencies[i / 2];
}

// The operands in one scratch allocation of the stream: positions first, the frequencies at
// a 16-byte aligned offset (the broadcasts read 16 B).
struct RopeOperands {
  Tensor scratch;
  const float* positions;
  const float* frequencies;
};

inline RopeOperands rope_operands_of(const Problem& p, const epilogue::Rope& rope, int device,
                                     Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t frequency_offset = (p.m + 3) / 4 * 4;
  Tensor scratch =
      Tensor::empty({frequency_offset + p.n}, DType::Float32, Device::cuda(device), stream);
  float* positions = static_cast<float*>(scratch.data());
  float* frequencies = positions + frequency_offset;
  constexpr int kThreads = 256;
  const int64_t count = p.m > p.n ? p.m : p.n;
  const dim3 blocks(unsigned((count + kThreads - 1) / kThreads));
  const float* f = rope.frequencies.data_ptr<const float>();
  switch (rope.positions.dtype) {
    case DType::Int32:
      rope_operands<<<blocks, kThreads, 0, s>>>(rope.positions.data_ptr<const int32_t>(), p.m, f,
                                                p.n, rope.inverse, positions, frequencies);
      break;
    case DType::Int64:
      rope_operands<<<blocks, kThreads, 0, s>>>(rope.positions.data_ptr<const int64_t>(), p.m, f,
                                                p.n, rope.inverse, positions, frequencies);
      break;
    default:  // float32: the program's validation admits no other type
      rope_operands<<<blocks, kThreads, 0, s>>>(rope.positions.data_ptr<const float>(), p.m, f, p.n,
                                                rope.inverse, positions, frequencies);
      break;
  }
  TG_CUDA_CHECK_LAUNCH();

  return {std::move(scratch), positions, frequencies};
}

}  // namespace tilegrid::gemm::sm90::programs
