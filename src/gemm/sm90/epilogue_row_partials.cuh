#pragma once
// Fused programs store(bfloat16) > row_partials(op, 256) (either order) for op = sum, max and
// logsumexp (internal, sm_90a): the product and one float32 partial per (row, N tile), e.g.
// the log-sum-exp of a language-model head's logits that a cross-entropy needs, without
// reading the logits again. One translation unit per op (epilogue_row_<op>.cu).
//
// CUTLASS's column reduction node (in its naming: it reduces into a column vector) combines
// in three stages - per thread in registers, across the lanes of a row with shuffles (pairs
// of values), across warps in shared memory - with one functor each; here all three are the
// same associative, commutative combination. Out-of-bounds columns are skipped (the node's
// VisitCheckOOB), so a tile's partial covers exactly its columns.
#include <cmath>

#include "gemm/sm90/epilogue_programs.cuh"

namespace tilegrid::gemm::sm90::programs {

// log(e^a + e^b) = hi + log(1 + e^(lo - hi)) with hi = max(a, b), in base 2 on the
// special-function unit: ex2.approx (relative error 2^-22) and lg2.approx of a value in
// [1, 2] (absolute error ~2^-22), so the result is off by ~1e-7 of |hi| + 1. Two MUFU
// operations per element of the tile. -inf (the identity, and a partial of no columns)
// combines exactly: e^-inf = 0 without computing -inf - -inf.
CUTLASS_DEVICE float log_add_exp(float a, float b) {
  const float hi = fmaxf(a, b), lo = fminf(a, b);
  if (lo == -INFINITY) return hi;
  float e, l;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"((lo - hi) * 1.44269504f));
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(l) : "f"(1.0f + e));
  return fmaf(l, 0.693147181f, hi);
}

// f on two floats (register stage), or lane by lane on two Arrays of floats (shuffle and
// shared-memory stages).
template <class T, class F>
CUTLASS_DEVICE T lanewise(const T& a, const T& b, F f) {
  if constexpr (std::is_same_v<T, float>) {
    return f(a, b);
  } else {
    T out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < T::kElements; ++i) out[i] = f(a[i], b[i]);
    return out;
  }
}

// The three combinations.
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
    return lanewise(a, b, [](float x, float y) { return log_add_exp(x, y); });
  }
};

// D = round(acc) and the row partials of acc in float32, before the rounding.
template <template <class> class Combine>
struct StoreRowPartials {
  template <class ElementD, class Descriptor>
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float, kRound>,
      fusion::Sm90EVT<
          fusion::Sm90ColReduction<Combine, Combine, Combine, 0, typename Descriptor::TileShape,
                                   float, float, kRound, RowVectorStride, 4, true,
                                   /*FinalReduction=*/false>,
          fusion::Sm90AccFetch>>;
};

// The launcher of one op; `identity` is the combination's neutral element (0 or -inf).
template <template <class> class Combine>
void run_store_row_partials(const Problem& p, const epilogue::Program& program, float identity,
                            int device, Stream stream) {
  using Gemm = FusedGemm<StoreRowPartials<Combine>>;
  const TensorView* out = nullptr;
  const TensorView* partials = nullptr;
  for (const epilogue::Step& step : program.steps) {
    if (const auto* s = std::get_if<epilogue::Store>(&step)) out = &s->out;
    if (const auto* s = std::get_if<epilogue::RowPartials>(&step)) partials = &s->partials;
  }
  auto make_args = [identity](float* buffer) {
    return typename Gemm::Callbacks::Arguments{{{},                       // acc
                                                {buffer, identity, {}}},  // row partials
                                               {}};                       // round to D's type
  };
  launch_with_row_partials<Gemm>(p, *out, *partials, make_args, device, stream);
}

}  // namespace tilegrid::gemm::sm90::programs
