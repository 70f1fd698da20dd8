#pragma once
// The forward's epilogue on one consumer warpgroup (internal, sm_90a): the query tile's
// log-sum-exps and its output rows, O / sum in the output type, stored by TMA through shared
// memory where Sm90Traits::kStoreOByTma allows it, else from registers.
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>

#include <cstdint>

#include "attention/sm90/collective/fwd_softmax.cuh"
#include "attention/sm90/collective/fwd_tile_work.cuh"
#include "attention/sm90/flash_fwd_sm90_traits.h"
#include "hopper/named_barriers.h"

namespace tilegrid::attention::sm90 {

using namespace cute;

// One consumer warpgroup's 64 output rows through shared memory (Traits::kStoreOByTma): O /
// sum converted into the warpgroup's slice of smem.o (stmatrix), then one thread stores the
// slice by TMA. A slice is written again only once its previous store has read it (persistent
// CTAs); the kernel's last act is to wait for the stores (the slice must outlive them).
template <class Traits, class AccO>
__device__ __forceinline__ void store_o_by_tma(const KernelParams<Traits>& kp,
                                               typename Traits::SharedStorage& smem,
                                               const TileWork& w, int tid, const AccO& acc_o,
                                               const float (&inv)[2]) {
  using Element = typename Traits::Element;
  const int consumer = tid / 128;
  const int barrier_id = hopper::fwd_barrier::kOutputStore + consumer;
  const bool issues = tid % 128 == 0;
  Tensor sO = make_tensor(make_smem_ptr(smem.o.data()), typename Traits::SmemLayoutO{});
  Tensor sO_tile = make_tensor(make_smem_ptr(smem.o.data()), typename Traits::SmemLayoutOTile{});
  // Converted first, while the previous tile's store may still be reading the slice.
  Tensor rO = make_tensor<Element>(acc_o.layout());
  CUTE_UNROLL
  for (int i = 0; i < size(acc_o); ++i) rO(i) = Element(acc_o(i) * inv[(i / 2) % 2]);
  if (issues) tma_store_wait<0>();
  cutlass::arch::NamedBarrier::sync(128, barrier_id);
  auto copy_o = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{},
                                  typename Traits::TiledMmaO{});
  auto thr_copy_o = copy_o.get_thread_slice(tid);
  copy(copy_o, thr_copy_o.retile_S(rO), thr_copy_o.partition_D(sO_tile));
  // The writes made visible to the TMA (the async proxy), then all 128 threads done.
  cutlass::arch::fence_view_async_shared();
  cutlass::arch::NamedBarrier::sync(128, barrier_id);
  if (issues) {
    const int b = kp.p.cu_seqlens_q != nullptr ? 0 : w.batch;
    Tensor mO = domain_offset(make_coord(w.q_token0, _0{}),
                              kp.tma_o.get_tma_tensor(kp.shape_q)(_, _, w.head, b));
    Tensor gO = local_tile(mO, Shape<_64, typename Traits::HeadDim>{},
                           make_coord(w.m_block * Traits::kConsumerWarpgroups + consumer, _0{}));
    auto [tOgO, tOsO] = tma_partition(kp.tma_o, _0{}, Layout<_1>{},
                                      group_modes<0, 2>(sO(_, _, consumer)),
                                      group_modes<0, 2>(gO));
    copy(kp.tma_o, tOsO, tOgO);
    tma_store_arrive();
  }
}

// The output rows from registers: two adjacent columns a store.
template <class Traits, class ThrMmaO, class AccO>
__device__ __forceinline__ void store_o_registers(const FlashFwdParams& p, const TileWork& w,
                                                  const ThrMmaO& thr_o, const AccO& acc_o,
                                                  const float (&inv)[2],
                                                  const int (&thread_row)[2]) {
  using Element = typename Traits::Element;
  auto* o_ptr = static_cast<Element*>(p.out) + w.batch * p.out_batch_stride +
                int64_t(w.q_token0) * p.out_row_stride + w.head * p.out_head_stride;
  Tensor tOcO = thr_o.partition_C(
      make_identity_tensor(Shape<typename Traits::BlockM, typename Traits::HeadDim>{}));
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = thread_row[r];
    if (row < w.rows) {
      CUTE_UNROLL
      for (int j = 0; j < size<0, 2>(acc_o); ++j) {
        cutlass::AlignedArray<Element, 2> pair;
        pair[0] = Element(acc_o(make_coord(0, r, j), 0, 0) * inv[r]);
        pair[1] = Element(acc_o(make_coord(1, r, j), 0, 0) * inv[r]);
        const int col = get<1>(tOcO(make_coord(0, r, j), 0, 0));
        *reinterpret_cast<cutlass::AlignedArray<Element, 2>*>(
            o_ptr + (int64_t(w.row0) + row) * p.out_row_stride + col) = pair;
      }
    }
  }
}

// The epilogue of one query tile on consumer warpgroup `consumer` (tid: the thread among the
// consumers): LSE = (max * scale + log2(sum)) * ln 2, then O / sum.
template <class Traits, class ThrMmaO, class AccO>
__device__ __forceinline__ void store_tile(const KernelParams<Traits>& kp,
                                           typename Traits::SharedStorage& smem,
                                           const TileWork& w, int consumer, int tid,
                                           const ThrMmaO& thr_o, const AccO& acc_o,
                                           const FwdSoftmax<Traits>& softmax,
                                           const int (&thread_row)[2]) {
  const FlashFwdParams& p = kp.p;
  float* lse_ptr = p.lse == nullptr ? nullptr
                                    : p.lse + w.batch * p.lse_batch_stride +
                                          w.head * p.lse_head_stride + w.q_token0 + w.row0;
  float sum[2], inv[2];
  softmax.finish(sum, inv);
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = thread_row[r];
    if (lse_ptr != nullptr && tid % 4 == 0 && row < w.rows) lse_ptr[row] = softmax.lse(r, sum[r]);
  }
  // This warpgroup's 64 rows by TMA where they fit in shared memory and the store cannot
  // reach past the sequence: a dense batch's tensor ends with the sequence (TMA drops the
  // rows past it), a variable-length batch's does not, so there only a slice of 64 rows
  // that all belong to the sequence.
  if constexpr (Traits::kStoreOByTma) {
    const int consumer_rows = w.rows - 64 * consumer;
    if (!kp.store_o_direct && (p.cu_seqlens_q == nullptr || consumer_rows >= 64))
      return store_o_by_tma(kp, smem, w, tid, acc_o, inv);
  }
  store_o_registers<Traits>(p, w, thr_o, acc_o, inv, thread_row);
}

}  // namespace tilegrid::attention::sm90
