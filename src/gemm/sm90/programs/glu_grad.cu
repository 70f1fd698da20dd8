// Fused programs: glu_grad(silu, T) > store(T) and glu_grad(gelu_tanh, T) > store(T), in the
// data-gradient layout - the backward of a SwiGLU / GeGLU MLP's activation fused into the down
// projection's data gradient dh = dy * w_down: with the saved [M, 2N] pre-activation pairs
// (g, u), the gradient of the gate+up product, interleaved (dg, du), [M, 2N] - twice the
// product's width.
//
// CUTLASS's stores and loads move tiles of the accumulator's shape. One pair of 16-bit values
// is 32 bits, so both the saved pairs and the result travel as int32 words: the input is read
// as an int32 [M, N] matrix (an auxiliary TMA load), D is declared int32 [M, N] over the
// [M, 2N] output (row strides halved), and word j of a row holds pair j, g (or dg) in its low
// half - the little-endian layout of the pairs in memory.
#include <type_traits>

#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90 {
namespace programs {

// A word's two 16-bit values as float32, and two float32 values rounded into a word. A
// bfloat16 is the high half of a float32, so its conversion is a shift or a mask (the kernel
// as it was measured before float16 was added); a float16 converts through cvt.
template <class Element>
CUTLASS_DEVICE float low_half(uint32_t w) {
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) return __uint_as_float(w << 16);
  return float(Element::bitcast(uint16_t(w & 0xffffu)));
}
template <class Element>
CUTLASS_DEVICE float high_half(uint32_t w) {
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>)
    return __uint_as_float(w & 0xffff0000u);
  return float(Element::bitcast(uint16_t(w >> 16)));
}
template <class Element>
CUTLASS_DEVICE int32_t pack_halves(float lo, float hi) {
  return static_cast<int32_t>(uint32_t(Element(lo).raw()) | uint32_t(Element(hi).raw()) << 16);
}

// dy (the accumulator) and the (g, u) words -> the (dg, du) words.
template <epilogue::Activation Fn, class Element>
struct GluGradWordsCallbacks : fusion::EmptyConsumerStoreCallbacks {
  template <class ElementAccumulator, class ElementInput, int FragmentSize>
  CUTLASS_DEVICE cutlass::Array<int32_t, FragmentSize> visit(
      cutlass::Array<ElementAccumulator, FragmentSize> const&, int, int, int,
      cutlass::Array<ElementInput, FragmentSize> const& dy,
      cutlass::Array<int32_t, FragmentSize> const& pairs) {
    cutlass::Array<int32_t, FragmentSize> out;
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < FragmentSize; ++k) {
      const auto w = static_cast<uint32_t>(pairs[k]);
      float dg, du;
      epilogue::glu_grad(Fn, float(dy[k]), low_half<Element>(w), high_half<Element>(w), dg, du);
      out[k] = pack_halves<Element>(dg, du);
    }
    return out;
  }
};

template <epilogue::Activation Fn, class Element>
struct GatedPairsGrad {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<StatelessNode<GluGradWordsCallbacks<Fn, Element>>,
                                    fusion::Sm90AccFetch, AuxLoad<Descriptor, int32_t>>;
};

// An [M, 2N] 16-bit matrix as int32 [M, N]: its row stride in words.
inline int64_t word_row_stride(const TensorView& t) {
  return tma_row_stride(t) / 2;
}

template <epilogue::Activation Fn, class Element>
void run_gated_pairs_grad(const Problem& p, const TensorView& input, const TensorView& out,
                          int device, Stream stream) {
  // Ping-pong 128x128: the epilogue reads and writes twice the product's bytes. On the
  // cooperative kernel the int32 load and store stages (96 KB of shared memory) left two
  // mainloop stages and no overlap: 1.481x the plain product against 1.067x here
  // (2026-12-01_h200_gemm_epilogue_backward_scalar_rows.json, ..._pingpong_trial.json).
  using Gemm = FusedGemm<Element, GatedPairsGrad<Fn, Element>, DgradB, int32_t, Pingpong128x128>;
  const typename Gemm::Callbacks::Arguments args{
      {},  // dy
      {static_cast<const int32_t*>(input.data), 0,
       matrix_stride(word_row_stride(input))},  // (g, u) words
      {}};                                      // (dg, du) words
  Problem words = with_output(p, out);
  words.ldo = word_row_stride(out);
  CudaDeviceGuard guard(device);
  launch<Gemm>(words, args, device, static_cast<cudaStream_t>(stream.handle));
}

}  // namespace programs

template <DType E>
void run_glu_grad(const Problem& p, const epilogue::Program& program, int device, Stream stream) {
  using programs::ElementOf;
  using epilogue::Activation;
  const auto& step = std::get<epilogue::GluGrad>(program.steps[0]);
  const TensorView& out = std::get<epilogue::Store>(program.steps[1]).out;
  if (step.act == Activation::Silu)
    return programs::run_gated_pairs_grad<Activation::Silu, ElementOf<E>>(p, step.input, out,
                                                                          device, stream);
  return programs::run_gated_pairs_grad<Activation::GeluTanh, ElementOf<E>>(p, step.input, out,
                                                                            device, stream);
}

}  // namespace tilegrid::gemm::sm90

TG_FUSED_LAUNCHER(run_glu_grad)
TG_FUSED_PROGRAM(run_glu_grad, Dgrad, "glu_grad(silu, T) > store(T)")
TG_FUSED_PROGRAM(run_glu_grad, Dgrad, "glu_grad(gelu_tanh, T) > store(T)")
