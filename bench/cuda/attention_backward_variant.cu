// One configuration of the Hopper attention backward (src/attention/sm90/flash_bwd_sm90_config.h)
// as a shared library with a C interface, for bench/bench_attention_backward_variants.py to load
// with ctypes next to the other configurations and the shipped one: each is compiled on its own
// (bench/attention_variants.sh), so the variants build in parallel and none needs the library.
// Not part of the library.
//   -DTG_HEAD_DIM=64|128|256 -DTG_FAST_EXP2=0|1 -DTG_DQ_ATOMIC=0|1|2 -DTG_STAGES=0|n
//   [-DTG_STATS_EARLY=-1|0|1 -DTG_SPLIT_EXP=-1|0|1]   (-1: the head dim's default)
//   [-DTG_PRODUCER_REGS=0|24|40]   (0: the head dim's default)
// Tensors are dense and contiguous: q, k, v, out, dout and the gradients [batch, seqlen, heads,
// head_dim] in bf16, lse [batch, heads, seqlen] in float32 (natural log), as the forward wrote.
#include <cstdint>
#include <cstdio>
#include <exception>

#include "attention/sm90/flash_bwd_sm90_launch.cuh"
#include "attention_variant_params.h"

namespace {

using namespace tilegrid::attention;
#ifndef TG_STATS_EARLY
#define TG_STATS_EARLY -1
#endif
#ifndef TG_SPLIT_EXP
#define TG_SPLIT_EXP -1
#endif
#ifndef TG_PRODUCER_REGS
#define TG_PRODUCER_REGS 0
#endif
using Config = sm90_bwd::BwdConfig<bool(TG_FAST_EXP2), int(TG_DQ_ATOMIC), TG_STAGES, TG_STATS_EARLY,
                                   TG_SPLIT_EXP, TG_PRODUCER_REGS>;
constexpr int kHeadDim = TG_HEAD_DIM;
using Traits = sm90_bwd::TraitsOf<cutlass::bfloat16_t, kHeadDim, Config>;

FlashBwdParams params(const void* q, const void* k, const void* v, const void* out,
                      const void* dout, const float* lse, void* dq, void* dk, void* dv, int batch,
                      int seqlen, int heads, int causal, float scale) {
  FlashBwdParams g;
  g.fwd = variant::dense_forward_params(q, k, v, out, lse, batch, seqlen, heads, kHeadDim, causal,
                                        scale);
  const int64_t row = int64_t(heads) * kHeadDim, seq = row * seqlen;
  g.dout = dout;
  g.dout_batch_stride = seq;
  g.dout_row_stride = row;
  g.dout_head_stride = kHeadDim;
  g.dq = dq;
  g.dk = dk;
  g.dv = dv;
  g.dq_batch_stride = g.dk_batch_stride = seq;
  g.dq_row_stride = g.dk_row_stride = row;
  g.dq_head_stride = g.dk_head_stride = kHeadDim;
  g.scale = scale;
  return g;
}

}  // namespace

extern "C" {

// What the configuration is: head dim, kBlockM, kBlockN, stages, fast exp2, dQ atomics (the
// config's kDqAtomic: 0, 1 or 2), and the shared memory a CTA takes.
void tg_variant_describe(int* out) {
  out[0] = kHeadDim;
  out[1] = Traits::kBlockM;
  out[2] = Traits::kBlockN;
  out[3] = Traits::kStages;
  out[4] = Traits::kFastExp2;
  out[5] = Traits::kDqAtomic;
  out[6] = Traits::kSmemBytes;
}

// Floats of each workspace buffer: lse_log2 and delta (rows), dq_accum (rows x row floats),
// and the int32 counters of deterministic=True.
void tg_variant_workspace(int batch, int seqlen, int heads, int64_t* out) {
  FlashFwdParams p;
  p.seqlen_q = seqlen;
  p.batch = batch;
  const sm90_bwd::PaddedRows rows = sm90_bwd::PaddedRows::of(p, Traits::kBlockM);
  out[0] = rows.total * heads;
  out[1] = out[0] * Traits::kDq.row_floats();
  out[2] = int64_t(heads) * rows.total / Traits::kBlockM + 1;
}

// The backward (preprocess, main kernel, postprocess) on `stream`; nullptr, or what went wrong.
const char* tg_variant_backward(const void* q, const void* k, const void* v, const void* out,
                                const void* dout, const float* lse, void* dq, void* dk, void* dv,
                                float* lse_log2, float* delta, float* dq_accum, int* dq_order,
                                int batch, int seqlen, int heads, int causal, float scale,
                                void* stream) {
  static char message[512];
  try {
    const FlashBwdParams g =
        params(q, k, v, out, dout, lse, dq, dk, dv, batch, seqlen, heads, causal, scale);
    sm90_bwd::launch<cutlass::bfloat16_t, kHeadDim, Config>(
        g, {lse_log2, delta, dq_accum, dq_order}, seqlen, static_cast<cudaStream_t>(stream));
    return nullptr;
  } catch (const std::exception& e) {
    snprintf(message, sizeof(message), "%s", e.what());
    return message;
  }
}

}  // extern "C"
