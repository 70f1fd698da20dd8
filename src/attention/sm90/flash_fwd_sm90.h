#pragma once
// The Hopper flash attention forward (internal, sm_90a only; see kernel/flash_fwd_sm90_kernel.cuh).
// The dispatcher asks `supported` first and runs the portable kernel for everything else.
#include <cstdint>
#include <initializer_list>

#include "attention/common/flash_fwd_params.h"
#include "tilegrid/core/device.h"
#include "tilegrid/core/dtype.h"

namespace tilegrid::attention::sm90 {

// Kernel variants, as bits. The two FlashAttention-4 ideas are compile-time in the kernel:
//  kConditionalRescale: keep a stale row maximum and rescale O and the row sum only when the
//    maximum grew by more than 8 in log2 units (exact: numerator and denominator share the
//    stale base; the largest term is then at most 2^8);
//  kSoftwareExp2: one exponential in four on the FMA units (exp2_poly.h) so that the
//    special-function unit, 16 exp2 a clock per SM, is not the bottleneck at small head dims.
// kPingPong is a run-time flag: the consumer warpgroups take turns to issue their products
//  (named barriers), so that one warpgroup's softmax runs while the tensor cores work on
//  another's (FlashAttention-3's inter-warpgroup overlap).
// kThreeConsumerWarpgroups: 192-row query tiles over three consumer warpgroups at 160
//  registers (FlashAttention-3's shape for head dim 64, where the softmax costs the most per
//  tensor-core FLOP). Head dim 64, without the FA4 switches only; ignored otherwise.
// kWideKeyTiles: FlashAttention-3's wider key tiles: 176 keys instead of 128 at head dim 128
//  (its shape without a causal mask: fewer softmax rounds a row), 80 instead of 64 at head dim
//  256 (its shape there, 224 KB of shared memory; ptxas spills 48 bytes of it, one reload a
//  key tile in the loop, the rest outside). Head dims 128 and 256, bfloat16, without the FA4
//  switches only; ignored otherwise.
// kKeyValueMulticast: clusters of two CTAs on neighbouring query tiles of a (head, sequence),
//  each loading half of every K/V tile and multicasting it into both (FlashAttention-3's
//  cluster for head dims >= 128 without a mask: half the L2-to-SM traffic of K and V). Head
//  dims 128 and 256, bfloat16, without the FA4 switches, with or without kWideKeyTiles; only
//  without a mask or window, without variable lengths, without kPersistent and with an even
//  number of query tiles; ignored otherwise.
// kDynamicTiles is a run-time flag, with kPersistent only: after its first tile a CTA takes
//  the next one no CTA has taken yet from a per-call counter, instead of a fixed stride
//  (tiles of unequal length: causal masks, windows, variable lengths).
// kDirectStoreO is a run-time flag: the output tile goes from registers to global memory
//  even where the kernel would stage it in shared memory and store it by TMA (two consumer
//  warpgroups at head dim 64, and head dim 128 with 128-key tiles; Sm90Traits::kStoreOByTma),
//  for a same-run comparison.
// kPersistent is a run-time flag: at most one CTA per SM, each looping over tiles, so that a
//  CTA's prologue (Q and first K/V loads) and epilogue overlap another tile's work (short
//  sequences). Every variant.
// The FA4 switches are off by default: neither paid on an H200 (docs/history/PERFORMANCE_LOG.md
// says what each costs and why). The tile shape and ping-pong default per head dimension
// (default_switches below).
enum Switches : int {
  kNoSwitches = 0,
  kConditionalRescale = 1,
  kSoftwareExp2 = 2,
  kPingPong = 4,
  kThreeConsumerWarpgroups = 8,
  kWideKeyTiles = 16,
  kPersistent = 32,
  kDynamicTiles = 64,
  kKeyValueMulticast = 128,
  kDirectStoreO = 512,
  kCompileTimeSwitches = kConditionalRescale | kSoftwareExp2,
  kDefaultCompileTimeSwitches = kNoSwitches,
};

// The variant `auto` runs: kDefaultVariants, a table written by
// bench/attention_defaults_table.py (flash_fwd_sm90_defaults.inc). Its rows are the fastest
// measured on an H200 (16k tokens a batch; the bits against each other in one run,
// bench/results/2026-12-01_h200_attention_scheduler_variants.json, "scheduler variants" below;
// earlier files where a choice was made before):
// - head dim 64: three consumer warpgroups with ping-pong (+12% over two at 16k tokens); up to
//   1k queries also persistent (+4% at 512 over two persistent warpgroups). With a mask that
//   ends rows early (causal, window: tiles of unequal length) up to 2k queries two
//   warpgroups, persistent, with dynamic tiles (scheduler variants, causal: 198 vs 192 TFLOP/s
//   static persistent at 512, 272 vs 258 at 1k, 334 vs 311 for the default above at 2k;
//   equal at 4k);
// - head dim 128: up to 1k queries without a mask persistent (+27% over the one-tile grid at
//   512: 444 vs 349); with a mask up to 4k persistent with dynamic tiles (scheduler variants:
//   291 vs 269 static persistent at 512, 389 vs 348 at 1k, 451 vs 428 plain at 2k, 513 vs
//   488 at 4k; the static round-robin hands the same CTAs the longest tile of every round).
//   Without a mask from 8k queries on: 176-key tiles in clusters of two sharing K/V loads
//   (bench/results/2026-12-01_h200_attention_kv_multicast.json, against the plain kernel in
//   the same run: 630 vs 617 at 16k, 604 vs 593 at 8k; at 2k and 4k 2-4% slower). Elsewhere
//   ping-pong (scheduler variants, against the plain kernel: +1-2% without a mask at 2k-4k,
//   595 vs 575 causal at 16k, 536 vs 542 causal at 8k);
// - head dim 256: up to 1k queries ping-pong, with a mask also persistent with dynamic tiles
//   (scheduler variants: 403 vs 390 for 80-key clusters at 512 full, 265 vs 251 causal);
//   beyond, 128 x 80 tiles in clusters of two (where the cluster applies; the tiles alone
//   otherwise): kv_multicast file, against the plain kernel, +2-5% without a mask from 1k to
//   16k (694 vs 663 at 16k); with a causal mask equal at 1k-4k and +2-4% at 8k-16k.
struct DefaultVariant {
  int head_dim;
  bool masked;
  int64_t max_seqlen_q;  // the class's upper bound; 0: any longer
  int switches;
};
inline constexpr DefaultVariant kDefaultVariants[] = {
#include "attention/sm90/flash_fwd_sm90_defaults.inc"
};

// The first row of the head dim and mask whose class holds max_seqlen_q; kNoSwitches for a
// head dim without rows.
constexpr int default_switches(int head_dim, int64_t max_seqlen_q, bool masked) {
  for (const DefaultVariant& row : kDefaultVariants) {
    if (row.head_dim == head_dim && row.masked == masked &&
        (row.max_seqlen_q == 0 || max_seqlen_q <= row.max_seqlen_q))
      return row.switches;
  }
  return kNoSwitches;
}

// Whether bit kKeyValueMulticast applies: clusters of two neighbouring query tiles of
// `block_m` rows share their K/V loads only when both tiles see the same keys, so that both
// CTAs load the same K/V tiles (no mask, no window, a dense batch: every sequence has
// seqlen_q queries and seqlen_k keys), when every pair is complete (an even number of query
// tiles) and without persistent CTAs. A pair whose CTAs loaded different tiles would wait on
// each other forever.
constexpr bool key_value_multicast_applies(const FlashFwdParams& p, int switches, int block_m) {
  return (switches & kKeyValueMulticast) != 0 && (switches & kPersistent) == 0 &&
         p.cu_seqlens_q == nullptr && p.window_left < 0 && p.window_right < 0 &&
         p.max_seqlen_q == p.seqlen_q && ((p.seqlen_q + block_m - 1) / block_m) % 2 == 0;
}

// TMA descriptors need every global stride to be a multiple of 16 bytes (8 elements of 16
// bits); the front end allows any stride on a dimension of extent 1, which then runs the
// portable kernels.
inline bool tma_strides(std::initializer_list<int64_t> strides) {
  for (int64_t s : strides)
    if (s % 8 != 0) return false;
  return true;
}

// True when the Hopper kernel handles this problem: float16 / bfloat16, head dimension 64,
// 128 or 256, and every stride of q, k, v and out a multiple of 8 elements (TMA needs 16-byte
// global strides; out is stored by TMA). The caller checks the device (compute capability 9.0).
bool supported(const FlashFwdParams& p, DType dtype, int head_dim);

// Runs the kernel with the given switches; bfloat16 has all four compile-time combinations
// (the benchmark compares them), float16 only the default one (other FA4 bits run that one)
// and the three-warpgroup shape at head dim 64 (its default).
void forward(const FlashFwdParams& p, DType dtype, int head_dim, int switches, Stream stream);

// One per head dimension, each in its own translation unit (flash_fwd_sm90_hdim<d>.cu).
void forward_hdim64(const FlashFwdParams& p, DType dtype, int switches, Stream stream);
void forward_hdim128(const FlashFwdParams& p, DType dtype, int switches, Stream stream);
void forward_hdim256(const FlashFwdParams& p, DType dtype, int switches, Stream stream);

}  // namespace tilegrid::attention::sm90
