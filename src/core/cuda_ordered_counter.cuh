#pragma once
// A counter in global memory that orders work between CTAs (internal, CUDA): a CTA waits until
// the counter reaches its turn, does its part, and passes the turn on. Used where the order of
// float additions must be the same every run (deterministic=True). The waiting CTA must only
// ever wait for CTAs launched before it, which then are running or done: otherwise the wait
// can deadlock.
namespace tilegrid::cuda {

// Spins until *counter == turn; what the CTA that set it wrote before passing the turn on is
// visible to the caller afterwards (acquire at GPU scope).
__device__ __forceinline__ void wait_for_turn(const int* counter, int turn) {
  int seen;
  while (true) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    if (seen == turn) return;
    __nanosleep(64);
  }
}

// Hands the turn on: everything this thread wrote before is visible to the CTA that next sees
// the counter (release at GPU scope).
__device__ __forceinline__ void pass_turn(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" : : "l"(counter) : "memory");
}

}  // namespace tilegrid::cuda
