#pragma once
// Cross-entropy row problem shared by the validating front end and the CPU/CUDA back ends
// (internal). See include/tilegrid/fusion/cross_entropy.h for the semantics.
#include <cstdint>

#include "tilegrid/core/dtype.h"

namespace tilegrid::cross_entropy {

struct Params {
  int64_t rows = 0, vocab = 0;
  DType dtype = DType::Float32;  // logits
  void* logits = nullptr;        // [rows, vocab], row stride below, in elements
  int64_t row_stride = 0;
  const int64_t* target = nullptr;  // [rows]
  int64_t ignore_index = -100;
  float* loss = nullptr;              // [rows]
  const float* grad_scale = nullptr;  // one element, or null: the logits are left as they are
};

void loss_and_grad_cpu(const Params& p);

}  // namespace tilegrid::cross_entropy
