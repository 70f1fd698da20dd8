#pragma once
// The Hopper GEMM (internal, sm_90a only): CUTLASS 3's TMA warp-specialized kernel, composed
// from its three replaceable parts -
//  - the collective mainloop: TMA loads of A and B tiles into a multi-stage shared-memory
//    pipeline filled by one producer warpgroup, wgmma by the consumer warpgroups, which
//    raise their register budget with setmaxnreg while the producer lowers its own;
//  - the collective epilogue: an epilogue visitor tree (EVT) that runs on the float32
//    accumulator tile, then TMA-stores the result. The tree is the template parameter
//    `Program` (see epilogue_store.cuh for the plain store); the epilogue programs of the
//    fusion pillar plug in here;
//  - the persistent tile scheduler: one CTA per SM loops over output tiles in a swizzled
//    raster order.
// Each (Config, element type, layouts, output type, Program) is one kernel; the files
// gemm_sm90_<dtype>_<layout>.cu instantiate the ones the library ships.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "gemm/gemm_problem.h"
#include "gemm/sm90/gemm_sm90.h"
#include "tilegrid/core/tensor.h"

namespace tilegrid::gemm::sm90 {

// Kernel configurations. Two, chosen for the Llama-3-8B layer at 8192 tokens (M = 8192; N
// and K among 4096, 6144, 14336, 28672) on an H200 (132 SMs, 227 KB of shared memory a CTA):
//
// Cooperative 128x256x64, cluster 2x1: both consumer warpgroups work on one 128x256 tile
// (64 rows each: 128 float32 accumulator registers a thread). Per k-step it loads 48 KB for
// 2 * 128 * 256 * 64 FLOPs, the highest FLOP/byte ratio that fits: 4 stages take 192 KB, the
// epilogue's 128x32 staging tile another 16 KB. The 2x1 cluster multicasts the 256x64 B tile
// (the larger one) to both CTAs, halving its L2->SM traffic. Every Llama shape has at least
// 1024 such tiles (7.8 waves on 132 SMs), so the tail wave costs at most ~3%.
struct Cooperative128x256 {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

// Ping-pong 128x128x64, cluster 2x1: each consumer warpgroup owns a whole 128x128 tile (again
// 128 accumulator registers a thread) and the two alternate, so one warpgroup's epilogue runs
// under the other's MMAs. That overlap is what pays once the epilogue does real work (the
// fusion programs) or when K is short; the tiles are half the size, so small problems fill
// more SMs. 32 KB a stage: 6 stages fit beside a 64x32 epilogue tile.
struct Pingpong128x128 {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
};

// The kernel type for one configuration. Layouts are CUTLASS's tags: A RowMajor is
// K-contiguous, B ColumnMajor is K-contiguous (B is indexed (N, K) by CUTLASS).
template <class Config, class Element, class LayoutA, class LayoutB, class ElementD, class Program>
struct Sm90Gemm {
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  // 16-byte accesses: TMA needs 16-byte aligned rows, which the front end checks.
  static constexpr int kAlignmentAB = 16 / sizeof(Element);
  static constexpr int kAlignmentD = 16 / sizeof(ElementD);

  // What an epilogue program sees: tile shapes, the epilogue sub-tile and its pipeline stages,
  // which auxiliary loads and stores need to match. No source matrix C (void): every program
  // reads what it needs through its own nodes.
  using EpilogueDescriptor = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      TileShape, cutlass::epilogue::collective::EpilogueTileAuto, void, ElementD,
      typename Config::EpilogueSchedule>;
  using Callbacks = typename Program::template Callbacks<ElementD, EpilogueDescriptor>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void,
      cutlass::layout::RowMajor, kAlignmentD, ElementD, cutlass::layout::RowMajor, kAlignmentD,
      typename Config::EpilogueSchedule, Callbacks>::CollectiveOp;

  // As many mainloop stages as fit beside the epilogue's shared memory.
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignmentAB, Element,
      LayoutB, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;

  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                           CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// A CuTe stride for one matrix whose leading dimension (the stride of its non-contiguous
// mode) is `ld`; the batch stride stays 0 (one matrix).
template <class Stride>
Stride leading_stride(int64_t ld) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<0>(s))>>::value)
    cute::get<1>(s) = ld;
  else
    cute::get<0>(s) = ld;
  return s;
}

// Swizzle 8 when the grid is at least 6 tiles wide in both directions (CUTLASS's rule): a wave
// of 132 CTAs then covers about 16 x 8 tiles of 128x256, whose A and B panels take
// (16 * 128 + 8 * 256) * 64 * 2 bytes = 0.5 MB a k-step, 34 MB over K = 4096, within the
// H200's 50 MB L2, so each panel comes from DRAM about once a wave. Raster order: along the
// longer of M and N, CUTLASS's heuristic.
constexpr int kMaxSwizzle = 8;

// Runs `Gemm` on problem `p` with epilogue arguments `epilogue_args` on the current device.
template <class Gemm>
void launch(const Problem& p, const typename Gemm::Callbacks::Arguments& epilogue_args, int device,
            cudaStream_t stream) {
  using Adapter = typename Gemm::Adapter;
  using Kernel = typename Gemm::Kernel;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementD = typename Kernel::ElementD;

  typename Adapter::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1};
  args.mainloop.ptr_A = static_cast<const ElementA*>(p.a);
  args.mainloop.dA = leading_stride<typename Kernel::StrideA>(p.lda);
  args.mainloop.ptr_B = static_cast<const ElementB*>(p.b);
  args.mainloop.dB = leading_stride<typename Kernel::StrideB>(p.ldb);
  args.epilogue.thread = epilogue_args;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = leading_stride<typename Kernel::StrideC>(p.ldo);
  args.epilogue.ptr_D = static_cast<ElementD*>(p.out);
  args.epilogue.dD = leading_stride<typename Kernel::StrideD>(p.ldo);
  args.hw_info.device_id = device;
  args.hw_info.sm_count = cuda::multiprocessor_count(device);
  args.scheduler.max_swizzle_size = kMaxSwizzle;

  Adapter gemm;
  TG_CHECK(gemm.can_implement(args) == cutlass::Status::kSuccess,
           "matmul: the sm90 kernel cannot run M=", p.m, " N=", p.n, " K=", p.k, " lda=", p.lda,
           " ldb=", p.ldb, " ldo=", p.ldo);
  // The persistent scheduler needs no workspace; an epilogue program with reductions may.
  Tensor workspace;
  const size_t workspace_bytes = Adapter::get_workspace_size(args);
  if (workspace_bytes > 0)
    workspace = Tensor::empty({static_cast<int64_t>(workspace_bytes)}, DType::UInt8,
                              Device::cuda(device), Stream{stream});
  cutlass::Status status = gemm.initialize(args, workspace.data(), stream);
  TG_CHECK(status == cutlass::Status::kSuccess,
           "matmul: sm90 kernel set-up failed: ", cutlassGetStatusString(status));
  status = gemm.run(stream);
  TG_CHECK(status == cutlass::Status::kSuccess,
           "matmul: sm90 kernel launch failed: ", cutlassGetStatusString(status));
  TG_CUDA_CHECK_LAUNCH();
}

// Routes to the configuration and output type of a call; one instantiation per
// (dtype, layout) translation unit.
template <class Element, class LayoutA, class LayoutB, class Program>
void run_layout(const Problem& p, Schedule schedule, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream.handle);
  const bool f32_out = p.out_dtype == DType::Float32;
  if (schedule == Schedule::Cooperative) {
    if (f32_out)
      launch<Sm90Gemm<Cooperative128x256, Element, LayoutA, LayoutB, float, Program>>(p, {}, device,
                                                                                      s);
    else
      launch<Sm90Gemm<Cooperative128x256, Element, LayoutA, LayoutB, Element, Program>>(p, {},
                                                                                        device, s);
  } else {
    if (f32_out)
      launch<Sm90Gemm<Pingpong128x128, Element, LayoutA, LayoutB, float, Program>>(p, {}, device,
                                                                                   s);
    else
      launch<Sm90Gemm<Pingpong128x128, Element, LayoutA, LayoutB, Element, Program>>(p, {}, device,
                                                                                     s);
  }
}

}  // namespace tilegrid::gemm::sm90
