#pragma once
// The plain epilogue program (internal, sm_90a): D = round(acc) in D's storage type.
// An epilogue program is a type with a member template
//   template <class ElementD, class EpilogueDescriptor> using Callbacks = <an sm90 EVT>;
// EpilogueDescriptor gives the tile shapes and the pipeline stages that auxiliary loads and
// stores of a larger program are built with; Sm90Gemm (gemm_sm90_kernel.cuh) hands it over.
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"

namespace tilegrid::gemm::sm90 {

struct StoreAccumulator {
  template <class ElementD, class EpilogueDescriptor>
  using Callbacks = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch>;
};

}  // namespace tilegrid::gemm::sm90
