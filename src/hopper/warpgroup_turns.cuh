#pragma once
// Consumer warpgroups that take turns to issue their tensor-core products (internal, sm_90a),
// ordered by named barriers: barrier first + w is "warpgroup w may issue", each wait of 128
// threads met by the 128 of the warpgroup before it. One warpgroup's softmax then runs while
// the tensor cores work on another's products (FlashAttention-3's inter-warpgroup overlap,
// "ping-pong"). A run-time flag: with `enabled` false every call does nothing.
#include <cutlass/arch/barrier.h>

namespace tilegrid::hopper {

template <int kWarpgroups>
struct WarpgroupTurns {
  bool enabled;
  int warpgroup;  // this thread's, 0 .. kWarpgroups - 1 (warp-uniform)
  int first;      // the first of kWarpgroups named-barrier ids (named_barriers.h)

  // The last warpgroup hands warpgroup 0 its first turn.
  __device__ __forceinline__ void start() const {
    if (enabled && warpgroup == kWarpgroups - 1) cutlass::arch::NamedBarrier::arrive(256, first);
  }
  __device__ __forceinline__ void take() const {
    if (enabled) cutlass::arch::NamedBarrier::sync(256, first + warpgroup);
  }
  __device__ __forceinline__ void pass() const {
    if (enabled) cutlass::arch::NamedBarrier::arrive(256, first + (warpgroup + 1) % kWarpgroups);
  }
  // Warpgroup 0 takes the one hand-over left after every warpgroup's last pass, so that every
  // barrier completes before the CTA exits.
  __device__ __forceinline__ void finish() const {
    if (enabled && warpgroup == 0) take();
  }
};

}  // namespace tilegrid::hopper
