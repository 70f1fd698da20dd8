#pragma once
// What the fused epilogue programs (internal, sm_90a only; one file each in programs/, see
// epilogue_programs.h) are built from. A program is a CUTLASS epilogue visitor tree over the
// float32 accumulator tile, composed from CUTLASS's nodes (broadcasts, TMA aux loads and
// stores, the reductions) and Sm90Compute nodes whose functors evaluate the formulas of the
// primitive headers (include/tilegrid/gemm/epilogue/*.h), so that the CPU evaluator and the
// kernels compute the same expressions.
//
// Programs run with the cooperative 128x256x64 configuration unless they name another: the
// programs of a transformer block sit on the large token-count GEMMs, where that
// configuration is the fastest (0.97-1.00x cuBLAS on a Llama-3-8B layer's products on an
// H200, ping-pong 0.93-0.98x). Each is compiled for bfloat16 and for float16 a and b
// (`Element`), its matrix operands and stores in the same type.
#include "gemm/sm90/gemm_sm90_kernel.cuh"  // first: it includes CUTLASS's collective builders
//
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/functional.h"
#include "gemm/sm90/epilogue_partials.h"
#include "gemm/sm90/epilogue_programs.h"
#include <type_traits>

#include "tilegrid/core/tensor.h"
#include "tilegrid/gemm/epilogue/elementwise.h"
#include "tilegrid/gemm/epilogue/pairwise.h"

namespace tilegrid::gemm::sm90::programs {

namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// Sm90Compute calls ComputeFn<Array<float, N>> on the fragment a thread holds (N = 16: the
// 128x32 epilogue sub-tile's 4096 elements over the cooperative kernel's 256 consumer
// threads).
template <epilogue::Activation Fn>
struct ActivationOp {
  template <class Fragment>
  struct Op {
    CUTLASS_DEVICE Fragment operator()(const Fragment& v) const {
      Fragment out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < Fragment::kElements; ++i) out[i] = epilogue::activate(Fn, v[i]);
      return out;
    }
  };
};

// A node whose visit() keeps no state and loads nothing: the tree hands each sub-tile's
// fragments (the accumulator and the children's results) to Callbacks::visit.
template <class Callbacks>
struct StatelessNode : fusion::Sm90VisitorImpl<> {
  using fusion::Sm90VisitorImpl<>::Sm90VisitorImpl;

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const&) {
    return Callbacks();
  }
};

// The gated pairs of an interleaved [g0, u0, g1, u1, ...] tile -> act(g_j) * u_j, half as
// many values. CUTLASS's store writes the accumulator tile's shape (N columns), so the
// halved 16-bit result leaves as bytes: D is declared int8 [M, N] over the [M, N / 2] Element
// output (row stride doubled), and pair j's two columns carry the two bytes of result j,
// little-endian, so the bytes land at the result's address. The fragment lists the
// accumulator registers in wgmma's order, values 2k and 2k + 1 being one pair (as for RoPE).
// A node of its own rather than an Sm90Compute: that one converts its float result to the
// output type element by element.
template <epilogue::Activation Fn, class Element>
struct GluBytes : fusion::EmptyConsumerStoreCallbacks {
  static_assert(sizeof(Element) == 2, "two bytes a result: one per column of its pair");
  template <class ElementAccumulator, class ElementInput, int FragmentSize>
  CUTLASS_DEVICE cutlass::Array<int8_t, FragmentSize> visit(
      cutlass::Array<ElementAccumulator, FragmentSize> const&, int, int, int,
      cutlass::Array<ElementInput, FragmentSize> const& x) {
    static_assert(FragmentSize % 2 == 0, "column pairs must stay in one fragment");
    cutlass::Array<Element, FragmentSize / 2> h;
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < FragmentSize / 2; ++k)
      h[k] = Element(epilogue::glu(Fn, float(x[2 * k]), float(x[2 * k + 1])));
    return reinterpret_cast<cutlass::Array<int8_t, FragmentSize> const&>(h);
  }
};

template <epilogue::Activation Fn, class Element>
using GluAsBytes = StatelessNode<GluBytes<Fn, Element>>;

// The register stage of the row partials of Reduce::SumSquares: acc + x^2 per element; the
// shuffle and shared-memory stages then add the per-thread sums (cutlass::plus).
template <class T>
struct SumSquaresOp {
  CUTLASS_HOST_DEVICE T operator()(const T& acc, const T& x) const { return acc + x * x; }
};

// Strides of CUTLASS's nodes: an [M, N] row-major matrix (row stride ld), a length-N vector
// (per column) and a length-M vector (per row), one batch.
using MatrixStride = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>;
using ColumnVectorStride = cute::Stride<cute::_0, cute::_1, int64_t>;  // values[j]
using RowVectorStride = cute::Stride<cute::_1, cute::_0, int64_t>;     // values[i]

inline MatrixStride matrix_stride(int64_t ld) {
  MatrixStride s{};
  cute::get<0>(s) = ld;
  return s;
}

// A TMA store of the values it visits into an auxiliary [M, N] row-major matrix of `Element`
// (e.g. a pre-activation saved for the backward), staged like the main output.
template <class Descriptor, class Element>
using AuxStore = fusion::Sm90AuxStore<
    Descriptor::StagesD, typename Descriptor::EpilogueTile, Element, kRound, MatrixStride,
    typename cutlass::epilogue::collective::detail::AuxStoreDescriptor<
        Descriptor, cutlass::layout::RowMajor, Element>::SmemLayoutAtom,
    typename cutlass::epilogue::collective::detail::AuxStoreDescriptor<
        Descriptor, cutlass::layout::RowMajor, Element>::CopyOpR2S>;

// A TMA load of an auxiliary [M, N] row-major matrix of `Element` (a residual, a saved
// pre-activation), staged like a source matrix C; visit() hands the raw elements on.
template <class Descriptor, class Element>
using AuxLoad = fusion::Sm90AuxLoad<
    Descriptor::StagesC, typename Descriptor::EpilogueTile, Element, MatrixStride,
    typename cutlass::epilogue::collective::detail::AuxLoadDescriptor<
        Descriptor, cutlass::layout::RowMajor, Element>::SmemLayoutAtom,
    typename cutlass::epilogue::collective::detail::AuxLoadDescriptor<
        Descriptor, cutlass::layout::RowMajor, Element>::CopyOpS2R>;

// The root of a program whose other nodes see float32 values: the value rounded to D's type,
// which the collective stores.
template <class ElementD>
using RoundToD = fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float, kRound>;

// Column sums of the values it visits, one float32 partial row per M tile (CUTLASS's row
// reduction node: it reduces into a row vector), which sum_column_partials adds up. Not the
// node's own final reduction: there the CTA that finishes a column tile last reads the other
// tiles' partials one dependent volatile load at a time (64 at M = 8192), and the program
// took 1.11x the plain product's time
// (bench/results/2026-11-30_h200_gemm_epilogue_rope_column_sum.json).
template <class Descriptor>
using ColumnSumPartials =
    fusion::Sm90RowReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0,
                             typename Descriptor::TileShape, float, float, kRound,
                             ColumnVectorStride, 4, true, /*FinalReduction=*/false>;

// The default configuration of the fused programs (FusedGemm below).
using Config = Cooperative128x256;

// The CUTLASS element type of a/b dtype E (bfloat16 or float16).
template <DType E>
using ElementOf = std::conditional_t<E == DType::BFloat16, cutlass::bfloat16_t, cutlass::half_t>;

// The fused GEMM of Element a and b in the forward layout (b K-contiguous: CUTLASS's
// ColumnMajor B) or, for the backward programs, the data-gradient layout (b = w, [K, N]
// row-major: RowMajor B), with D of type ElementD (Element, or the bytes / words of a result
// whose width differs from N). The configuration is the cooperative 128x256 kernel unless a
// program names another: the ping-pong 128x128 one overlaps one warpgroup's epilogue with
// the other's mainloop, which pays where the epilogue moves as many bytes as the product
// (the backward programs).
using ForwardB = cutlass::layout::ColumnMajor;
using DgradB = cutlass::layout::RowMajor;
template <class Element, class Program, class LayoutB = ForwardB, class ElementD = Element,
          class Cfg = Config>
using FusedGemm = Sm90Gemm<Cfg, Element, cutlass::layout::RowMajor, LayoutB, ElementD, Program>;

// The output tile of a fused GEMM.
template <class Gemm>
constexpr int64_t tile_m = cute::size<0>(typename Gemm::TileShape{});
template <class Gemm>
constexpr int64_t tile_n = cute::size<1>(typename Gemm::TileShape{});

// The product of `p` with D = the program's final store (out, ldo).
inline Problem with_output(Problem p, const TensorView& out) {
  p.out = out.data;
  p.out_dtype = out.dtype;
  p.ldo = tma_row_stride(out);
  return p;
}

// The same with D = the bytes of a glu program's [M, N / 2] output: rows of N bytes,
// the row stride doubled.
inline Problem with_glu_output(const Problem& p, const TensorView& out) {
  Problem bytes = with_output(p, out);
  bytes.ldo *= 2;
  return bytes;
}

// Runs Gemm with D = out, then sums the per-M-tile column partials of its row reduction
// node (non-final: one partial row of round_up(N, tile N) float32 per M tile) into sums [N].
// make_args(float* partials) returns the tree's arguments.
template <class Gemm, class MakeArgs>
void launch_with_column_sums(const Problem& p, const TensorView& out, const TensorView& sums,
                             MakeArgs make_args, int device, Stream stream) {
  CudaDeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t tiles = (p.m + tile_m<Gemm> - 1) / tile_m<Gemm>;
  const int64_t ld = (p.n + tile_n<Gemm> - 1) / tile_n<Gemm> * tile_n<Gemm>;
  Tensor partials = Tensor::empty({tiles * ld}, DType::Float32, Device::cuda(device), stream);
  auto* buffer = static_cast<float*>(partials.data());
  launch<Gemm>(with_output(p, out), make_args(buffer), device, s);
  sum_column_partials(buffer, tiles, ld, p.n, sums.data_ptr<float>(), s);
}

// Runs Gemm with D = out, then lays the row partials of its column reduction node
// (non-final: M-major, [ceil(N / 256), round_up(M, 128)] States - float32, or running
// log-sum-exps) out as the program's float32 [M, ceil(N / 256)]. make_args(State* buffer)
// returns the tree's arguments.
template <class Gemm, class State = float, class MakeArgs>
void launch_with_row_partials(const Problem& p, const TensorView& out,
                              const TensorView& partials, MakeArgs make_args, int device,
                              Stream stream) {
  CudaDeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  static_assert(tile_n<Gemm> == kFusedTileN, "epilogue_programs.h states the row partials' tile");
  static_assert(sizeof(State) % sizeof(float) == 0, "the buffer is allocated in floats");
  const int64_t count = (p.n + tile_n<Gemm> - 1) / tile_n<Gemm>;
  const int64_t m_pad = (p.m + tile_m<Gemm> - 1) / tile_m<Gemm> * tile_m<Gemm>;
  constexpr int64_t kFloatsPerState = sizeof(State) / sizeof(float);
  Tensor buffer = Tensor::empty({count * m_pad * kFloatsPerState}, DType::Float32,
                                Device::cuda(device), stream);
  auto* data = static_cast<State*>(buffer.data());
  launch<Gemm>(with_output(p, out), make_args(data), device, s);
  transpose_row_partials(data, p.m, m_pad, count, partials.data_ptr<float>(), s);
}

}  // namespace tilegrid::gemm::sm90::programs

// A program file's launcher, `template <DType E> void NAME(const Problem&, const
// epilogue::Program&, int device, Stream)`, compiled for both element types.
#define TG_FUSED_LAUNCHER(NAME)                                                              \
  namespace tilegrid::gemm::sm90 {                                                           \
  template void NAME<DType::BFloat16>(const Problem&, const epilogue::Program&, int, Stream); \
  template void NAME<DType::Float16>(const Problem&, const epilogue::Program&, int, Stream);  \
  }

// A signature that runs on a launcher (epilogue_programs.h): the build collects these lines
// into the registry; in the program's own file the line is a declaration only.
// (A launcher the line names but no file defines fails the library's link.)
#define TG_FUSED_PROGRAM(LAUNCHER, LAYOUT, SIGNATURE)                                      \
  static_assert(sizeof(SIGNATURE) > 1 &&                                                  \
                    ::tilegrid::gemm::Layout::LAYOUT == ::tilegrid::gemm::Layout::LAYOUT, \
                "a fused program names its launcher, a layout and a signature");
