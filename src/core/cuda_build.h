#pragma once
// The error of an op given CUDA tensors by a build without CUDA (internal), one message for
// every op: "<op>: tilegrid was built without CUDA; its tensors are on a CUDA device". Callers
// check the device first and call this on the CUDA branch, before any #ifdef'd kernel call.
#include "tilegrid/core/error.h"

namespace tilegrid {

inline void require_cuda_build([[maybe_unused]] const char* op) {
#ifndef TILEGRID_WITH_CUDA
  throw Error(
      detail::concat(op, ": tilegrid was built without CUDA; its tensors are on a CUDA device"));
#endif
}

}  // namespace tilegrid
