#pragma once
// The named-barrier ids (bar.sync) of the Hopper kernels, written in one place so that two uses
// that can be live at once never share an id (internal, sm_90a). CUTLASS's NamedBarrier::sync
// and ::arrive add the 8 ids CUTLASS reserves to these, and a CTA has 16: a kernel's ids are
// 0-7.
namespace tilegrid::hopper {

constexpr int kUserNamedBarriers = 8;

// The attention forward (attention/sm90/kernel/flash_fwd_sm90_kernel.cuh and its collectives).
namespace fwd_barrier {
// Ping-pong: consumer warpgroup w waits on kTurn + w for its turn to issue its products (up to
// three consumer warpgroups).
constexpr int kTurn = 0;
// The output tile's store to shared memory and its TMA copy: kOutputStore + w, over the 128
// threads of consumer warpgroup w.
constexpr int kOutputStore = 4;
static_assert(kTurn + 3 <= kOutputStore && kOutputStore + 3 <= kUserNamedBarriers);
}  // namespace fwd_barrier

// The attention backward (attention/sm90/flash_bwd_sm90_*.cuh).
namespace bwd_barrier {
// A kernel's first per-step barrier over its two consumer warpgroups (a step's dS, or P, in
// shared memory) and its second one (each kernel's comment says what it orders).
constexpr int kStepFirst = 1, kStepSecond = 6;
// The shared-memory dQ path, + consumer warpgroup w, over w and the writer warp: part w stored
// (full: the writer waits), part w read out (empty: w waits).
constexpr int kDqFull = 2, kDqEmpty = 4;
// The atomic dQ paths under deterministic=True, which have no writer warp: this key tile's turn
// at the query tile (+ w, over warpgroup w), and both parts added (over both).
constexpr int kDqTurn = 2, kDqAdded = 4;
static_assert(kStepFirst < kDqFull && kDqEmpty + 2 <= kStepSecond &&
              kStepSecond < kUserNamedBarriers);
}  // namespace bwd_barrier

}  // namespace tilegrid::hopper
