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
// kDqAtomic: the consumer warpgroups add their dQ part into the float32 sums straight from
//   registers (red.global.add.v2.f32) instead of through the float32 tile in shared memory and
//   the producer's bulk-add warp. Frees the tile (36 KB at head dim 128, 68 KB at 256) for
//   more Q/dO stages, costs the consumers kBlockM x head_dim / 512 reductions a thread a step.
// kStages: Q/dO pipeline stages; 0 takes the head dim's default (2 at 64 and 128, 1 at 256,
//   as many as fit 227 KB with the shared-memory dQ tile).
template <bool kFastExp2_ = true, bool kDqAtomic_ = false, int kStages_ = 0>
struct BwdConfig {
  static constexpr bool kFastExp2 = kFastExp2_;
  static constexpr bool kDqAtomic = kDqAtomic_;
  static constexpr int kStages = kStages_;
  // The stages to use where the head dim's default is `fallback`.
  static constexpr int stages_or(int fallback) { return kStages > 0 ? kStages : fallback; }
};

}  // namespace tilegrid::attention::sm90_bwd
