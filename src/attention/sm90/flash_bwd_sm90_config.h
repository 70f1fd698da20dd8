#pragma once
// The compile-time choices of the Hopper attention backward that measurement decides
// (internal). A kernel's traits take one BwdConfig; BwdConfig<> is what the library ships, and
// bench/attention_variants.sh builds and times the others side by side without editing a
// kernel.
namespace tilegrid::attention::sm90_bwd {

// kFastExp2: P = 2^x by ex2.approx.ftz (one MUFU.EX2) instead of exp2f, whose denormal
//   handling adds an FSETP and two predicated FMULs to every score (4 instructions instead of
//   1; the score loop is about 6 instructions a score otherwise). Flushes P < 2^-126 to 0.
//   On by default: +3-5% at head dim 64, 0-3% at 128 and +6-11% at 256 on an H100, 16k
//   tokens a batch, bf16 (bench/attention_variants.sh times both).
// kDqAtomic: how a step's dQ reaches the float32 sums (flash_bwd_sm90_rows.h, DqTileLayout).
//   0 (the default): through the float32 tile in shared memory, which the producer's writer
//   warp adds with bulk additions.
//   1: the consumer warpgroups add their dQ part straight from registers
//   (red.global.add.v2.f32, the sums in row order) instead, once the dQ product is in. Frees
//   the tile (36 KB at head dim 128, 68 KB at 256) for more Q/dO stages, costs the consumers
//   kBlockM x head_dim / 512 reductions a thread a step.
//   2: as 1, but red.global.add.v4.f32 and the sums of a part in the order of the warpgroup's
//   accumulator registers (DqTileLayout::fragment_offset): float4 k of every thread of the
//   warpgroup lies in one run of 128 float4 (thread order), so a warp's reduction covers 512
//   consecutive bytes, and a thread issues kBlockM x head_dim / 1024 reductions a step. The
//   postprocess reads that order back (postprocess_fragment_kernel); FlashAttention-3 adds its
//   dQ this way. The buffer keeps its size (the parts' padding floats go unused).
//   deterministic=True is served as under 1 (the key tiles take turns at a query tile, and
//   each adds an element once), so it needs no fallback to the shared-memory path. Written
//   for head dim 256; 64 and 128 take the same code. At head dim 256 on an H200 (bf16, 2k and
//   16k tokens) it is correct and 0.91-0.97x the shared-memory path's speed (1 is 0.75-0.81x;
//   a second stage changes neither), so 0 stays the default
//   (bench/results/2026-12-06_h200_attention_backward_dq_fragment_variants.json).
// kStages: Q/dO pipeline stages; 0 takes the head dim's default (2 at 64 and 128, 1 at 256,
//   as many as fit 227 KB with the shared-memory dQ tile).
// kStatsEarly (head dims 64 and 128): each thread reads the lse of its queries from shared
//   memory into registers before the step's products are issued, and the row deltas while
//   dP^T's product runs, instead of at their first use (the first exp2 then waited on a
//   shared-memory load once S^T was in: 5% of the kernel's stall samples at head dim 128,
//   Nsight Compute). Costs kBlockM / 4 registers a thread.
// kSplitExp (head dims 64 and 128): half of P^T's exponentials are formed after dP^T's product
//   is in, beside dS^T's arithmetic, instead of all of them in one run of MUFU instructions
//   between the two waits, which stalled on the special-function unit (a warp's MUFU takes it
//   8 cycles).
//   Both -1: the head dim's default, measured on an H100 at 16k tokens a batch, bf16
//   (bench/results/2026-12-06_h100_attention_backward_stats_exp_variants.json): at 128
//   kStatsEarly alone (+5% at 16k, +1-2% at 2k; kSplitExp +3.5-4.4%, both +2.5-4.2%); at 64
//   kSplitExp alone (+7-11% at 16k, +1.5% at 2k; kStatsEarly's 32 registers spill there,
//   -3 to +2%, both -7 to -9%).
// kProducerRegisters: registers a producer thread keeps once the consumers take theirs; the
//   consumers take the rest of the CTA's 168 x 384 = 64,512 (setmaxnreg moves registers within
//   the CTA's allocation), rounded down to a multiple of 8: 24 leaves them 240, 40 leaves 232
//   (CUTLASS's warp-specialized GEMMs' split). 0: the head dim's default, 24 at 64 and 40 at 128
//   and 256. At 24 the producer's TMA and dQ-writer code spills (220 bytes at head dim 256, 28
//   at 128; every spill after the producer's setmaxnreg); at 40 it spills 8 and 0 bytes, and
//   the consumers' loops fit 232 without spilling. Measured on an H100 at 2k and 16k tokens,
//   bf16 (bench/results/2026-12-06_h100_attention_backward_producer_registers.json): 40 is
//   1.09-1.11x at 256, 1.01-1.02x at 128, 0.96-1.00x at 64 (where the consumers spill more).
template <bool kFastExp2_ = true, int kDqAtomic_ = 0, int kStages_ = 0, int kStatsEarly_ = -1,
          int kSplitExp_ = -1, int kProducerRegisters_ = 0>
struct BwdConfig {
  static_assert(kDqAtomic_ >= 0 && kDqAtomic_ <= 2, "kDqAtomic: 0, 1 or 2");
  static constexpr bool kFastExp2 = kFastExp2_;
  static constexpr int kDqAtomic = kDqAtomic_;
  static constexpr int kStages = kStages_;
  static constexpr int kStatsEarly = kStatsEarly_;
  static constexpr int kSplitExp = kSplitExp_;
  static constexpr int kProducerRegisters = kProducerRegisters_;
  static_assert(kProducerRegisters == 0 ||
                    (kProducerRegisters % 8 == 0 && kProducerRegisters >= 24 &&
                     kProducerRegisters <= 80),
                "kProducerRegisters: 0 (the head dim's default) or a multiple of 8, 24 to 80");
  // The producer's registers where the head dim's default is `fallback`.
  static constexpr int producer_registers_or(int fallback) {
    return kProducerRegisters > 0 ? kProducerRegisters : fallback;
  }
  // A switch that is on (1), off (0) or the head dim's default (-1).
  static constexpr bool on_or(int value, bool fallback) {
    return value < 0 ? fallback : value != 0;
  }
  // The stages to use where the head dim's default is `fallback`.
  static constexpr int stages_or(int fallback) { return kStages > 0 ? kStages : fallback; }
};

}  // namespace tilegrid::attention::sm90_bwd
