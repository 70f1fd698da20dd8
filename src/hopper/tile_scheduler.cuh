#pragma once
// Which tiles a CTA runs (internal, sm_90a): one tile a CTA, or persistent CTAs that loop over
// tile positions 0 .. count - 1 with a static stride or taking them dynamically from a
// counter. A kernel maps a position to its own work (the attention forward:
// attention/sm90/collective/fwd_tile_work.cuh).
#include <cutlass/arch/barrier.h>

namespace tilegrid::hopper {

// Dynamic tiles: a CTA's scheduler thread hands tile positions to the threads that run them
// through shared memory of the kernel's SharedStorage, which declares
//   alignas(8) cutlass::arch::ClusterBarrier::ValueType tile_full[2], tile_empty[2];
//   int tile_slot[2];
// The k-th position goes into tile_slot[k % 2], announced on tile_full[k % 2]; each reader
// arrives on tile_empty[k % 2] once it has read it, after which the slot may be written
// again. (Members of the storage rather than a struct of their own: nested, they moved a
// register of the attention forward's key-tile loop at head dim 256 into local memory.)

// One thread, before the CTA's first barrier sync; `readers`: the threads that call tile().
template <class Storage>
__device__ __forceinline__ void init_tile_slots(Storage& smem, int readers) {
  for (int i = 0; i < 2; ++i) {
    cutlass::arch::ClusterBarrier::init(&smem.tile_full[i], 1);
    cutlass::arch::ClusterBarrier::init(&smem.tile_empty[i], readers);
  }
}

struct TileScheduler {
  int count;        // tile positions
  bool persistent;  // false: the CTA runs position 0 only (its grid coordinates say which tile)
  int* counter;     // dynamic tiles (persistent only): a zeroed counter of this launch, else null

  __device__ __forceinline__ int first() const { return persistent ? int(blockIdx.x) : 0; }
  __device__ __forceinline__ int stride() const { return persistent ? int(gridDim.x) : 1; }

  // Static tiles: a CTA runs first(), first() + stride(), ... Dynamic tiles: after its first,
  // a CTA takes the next position that no CTA has taken yet, so a CTA that drew short tiles
  // draws more (list scheduling, which pays where tiles differ in length: causal masks,
  // windows, variable lengths). A scheduler thread of its own takes the positions and
  // announces each, the last one (>= count) included, through the two slots. It takes a
  // position only once its slot is free, so a CTA holds at most two tiles it has not started.
  // The slot is plain shared memory between the mbarrier's arrive (release) and wait
  // (acquire); CUTLASS's barrier asm has no memory clobber, so compiler barriers keep the
  // slot's store and load between them.
  template <class Storage>
  __device__ __forceinline__ void schedule_tiles(Storage& smem) const {
    int t = first();
    for (int k = 0;; ++k) {
      if (k >= 2) {
        cutlass::arch::ClusterBarrier::wait(&smem.tile_empty[k & 1], ((k >> 1) - 1) & 1);
        asm volatile("" ::: "memory");
      }
      if (k > 0) t = int(gridDim.x) + atomicAdd(counter, 1);
      smem.tile_slot[k & 1] = t;
      asm volatile("" ::: "memory");
      cutlass::arch::ClusterBarrier::arrive(&smem.tile_full[k & 1]);
      if (t >= count) return;
    }
  }

  // The k-th tile position (k = 0, 1, ...) of a thread that runs tiles; >= count: no more.
  template <class Storage>
  __device__ __forceinline__ int tile(Storage& smem, int k) const {
    if (counter == nullptr) return first() + k * stride();
    cutlass::arch::ClusterBarrier::wait(&smem.tile_full[k & 1], (k >> 1) & 1);
    asm volatile("" ::: "memory");
    const int t = smem.tile_slot[k & 1];
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&smem.tile_empty[k & 1]);
    return t;
  }
};

}  // namespace tilegrid::hopper
