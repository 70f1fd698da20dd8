// One build of the Hopper attention forward (src/attention/sm90/flash_fwd_sm90_launch.cuh) with
// a register split of its own, as a shared library with a C interface, for
// bench/bench_attention_forward_variants.py to load with ctypes next to the shipped split: each
// is compiled on its own (bench/attention_variants.sh with KIND=forward). Not part of the
// library. The kernel and tile shape are the library's default for the problem
// (default_switches), bf16.
//   -DTG_HEAD_DIM=64|128|256 [-DTG_PRODUCER_REGS=0|24|32|40]   (0: the library's split)
// Tensors are dense and contiguous: q, k, v, out [batch, seqlen, heads, head_dim] in bf16, lse
// [batch, heads, seqlen] in float32 (natural log).
#include <cstdint>
#include <cstdio>
#include <exception>

#include "attention/sm90/flash_fwd_sm90_launch.cuh"
#include "attention_variant_params.h"

namespace {

using namespace tilegrid::attention;
#ifndef TG_PRODUCER_REGS
#define TG_PRODUCER_REGS 0
#endif
constexpr int kHeadDim = TG_HEAD_DIM;
// The two-consumer-warpgroup traits of the head dim (the register split shown; the launch may
// pick another tile shape with the same split).
using Traits = sm90::Sm90Traits<cutlass::bfloat16_t, kHeadDim, false, false, 2,
                                sm90::TileShape<kHeadDim>::kBlockN, 1, TG_PRODUCER_REGS>;

}  // namespace

extern "C" {

// Head dim, producer and consumer registers a thread (two consumer warpgroups).
void tg_variant_describe(int* out) {
  out[0] = kHeadDim;
  out[1] = Traits::kProducerRegisters;
  out[2] = Traits::kConsumerRegisters;
}

// The forward on `stream` with the library's default switches for the problem; nullptr, or
// what went wrong.
const char* tg_variant_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                               int batch, int seqlen, int heads, int causal, float scale,
                               void* stream) {
  static char message[512];
  try {
    const FlashFwdParams p = variant::dense_forward_params(q, k, v, out, lse, batch, seqlen, heads,
                                                           kHeadDim, causal, scale);
    sm90::launch<kHeadDim, TG_PRODUCER_REGS>(p, tilegrid::DType::BFloat16,
                                             sm90::default_switches(kHeadDim, seqlen, causal != 0),
                                             tilegrid::Stream{stream});
    return nullptr;
  } catch (const std::exception& e) {
    snprintf(message, sizeof(message), "%s", e.what());
    return message;
  }
}

}  // extern "C"
