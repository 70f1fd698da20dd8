#pragma once
// Fused programs store(T) > row_partials(op, 256) (either order) for op = sum, max and
// logsumexp (internal, sm_90a): the product and one float32 partial per (row, N tile), e.g.
// the log-sum-exp of a language-model head's logits that a cross-entropy needs, without
// reading the logits again. One program file per op (programs/store_row_<op>.cu).
//
// CUTLASS's column reduction node (in its naming: it reduces into a column vector) combines
// in three stages - per thread in registers, across the lanes of a row with shuffles (pairs
// of values), across warps in shared memory - with one functor each; here all three are the
// same associative, commutative combination. Out-of-bounds columns are skipped (the node's
// VisitCheckOOB), so a tile's partial covers exactly its columns.
#include <cmath>
#include <type_traits>

#include "gemm/sm90/epilogue_programs.cuh"
#include "tilegrid/gemm/epilogue/log_sum_exp_state.h"

// The node converts its float32 input to its compute type element by element; for LseState
// that is LseState::of (CUTLASS's generic converter would static_cast).
namespace cutlass {
template <int N, FloatRoundStyle Round>
struct NumericArrayConverter<tilegrid::epilogue::LogSumExpState, float, N, Round,
                             transform::thread::UnaryTransform::Identity> {
  using result_type = Array<tilegrid::epilogue::LogSumExpState, N>;
  using source_type = Array<float, N>;
  CUTLASS_HOST_DEVICE static result_type convert(const source_type& s) {
    result_type out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = tilegrid::epilogue::LogSumExpState::of(s[i]);
    return out;
  }
  CUTLASS_HOST_DEVICE result_type operator()(const source_type& s) const { return convert(s); }
};
}  // namespace cutlass

namespace tilegrid::gemm::sm90::programs {

// The running log-sum-exp of the values a thread, a row of lanes, a tile has seen
// (log_sum_exp_state.h): its partials travel through the node's stages as 8-byte states (a
// shuffle moves one, the shared-memory stage one a lane) and become values in the finishing
// kernel. One exponential per element; combining log-sum-exps directly (hi + log(1 + e^(lo -
// hi))) took an exponential and a logarithm per element, each in a chain of dependent
// combinations per row, and the program 1.149x the plain product's time on the Llama-3 LM
// head (bench/results/2026-12-01_h200_gemm_epilogue_backward_scalar_rows_final.json).
using LseState = epilogue::LogSumExpState;

template <class T>
struct IsFragment : std::false_type {};
template <class T, int N, bool RegisterSized>
struct IsFragment<cutlass::Array<T, N, RegisterSized>> : std::true_type {};

// f on two values (register stage), or lane by lane on two Arrays of them (shuffle and
// shared-memory stages).
template <class T, class F>
CUTLASS_DEVICE T lanewise(const T& a, const T& b, F f) {
  if constexpr (!IsFragment<T>::value) {
    return f(a, b);
  } else {
    T out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < T::kElements; ++i) out[i] = f(a[i], b[i]);
    return out;
  }
}

// The three combinations: on float32 values (sum, max), on LseState (log-sum-exp).
template <class T>
struct SumOp {
  CUTLASS_HOST_DEVICE T operator()(const T& a, const T& b) const {
    return cutlass::plus<T>{}(a, b);
  }
};

template <class T>
struct MaxOp {
  CUTLASS_DEVICE T operator()(const T& a, const T& b) const {
    return lanewise(a, b, [](float x, float y) { return fmaxf(x, y); });
  }
};

template <class T>
struct LogSumExpOp {
  CUTLASS_DEVICE T operator()(const T& a, const T& b) const {
    return lanewise(a, b, [](const LseState& x, const LseState& y) { return combine(x, y); });
  }
};

// D = round(acc) and the row partials of acc in float32, before the rounding; the node
// combines `State`s (float, or LseState: the node converts each float32 value to one).
template <template <class> class Combine, class State>
struct StoreRowPartials {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      RoundToD<ElementD>,
      fusion::Sm90EVT<
          fusion::Sm90ColReduction<Combine, Combine, Combine, 0, typename Descriptor::TileShape,
                                   float, State, kRound, RowVectorStride, 4, true,
                                   /*FinalReduction=*/false>,
          fusion::Sm90AccFetch>>;
};

// The launcher of one op; `identity` is the combination's neutral element (0, -inf, or the
// empty LseState).
template <class Element, template <class> class Combine, class State>
void run_store_row_partials(const Problem& p, const epilogue::Program& program, State identity,
                            int device, Stream stream) {
  using Gemm = FusedGemm<Element, StoreRowPartials<Combine, State>>;
  const TensorView* out = nullptr;
  const TensorView* partials = nullptr;
  for (const epilogue::Step& step : program.steps) {
    if (const auto* s = std::get_if<epilogue::Store>(&step)) out = &s->out;
    if (const auto* s = std::get_if<epilogue::RowPartials>(&step)) partials = &s->partials;
  }
  auto make_args = [identity](State* buffer) {
    return typename Gemm::Callbacks::Arguments{{{},                       // acc
                                                {buffer, identity, {}}},  // row partials
                                               {}};                       // round to D's type
  };
  launch_with_row_partials<Gemm, State>(p, *out, *partials, make_args, device, stream);
}

}  // namespace tilegrid::gemm::sm90::programs
