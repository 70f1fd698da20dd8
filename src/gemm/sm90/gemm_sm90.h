#pragma once
// Entry points of the sm_90a GEMM kernels (internal; host code may include this without
// CUTLASS). One function per (input dtype, layout), each in its own translation unit
// gemm_sm90_<dtype>_<layout>.cu, handles both output types (the input's and float32) and both
// schedules.
#include <cstdint>

#include "gemm/gemm_problem.h"
#include "tilegrid/core/device.h"

namespace tilegrid::gemm::sm90 {

enum class Schedule : uint8_t { Cooperative, Pingpong };

void run_bf16_fprop(const Problem& p, Schedule schedule, int device, Stream stream);
void run_bf16_dgrad(const Problem& p, Schedule schedule, int device, Stream stream);
void run_bf16_wgrad(const Problem& p, Schedule schedule, int device, Stream stream);
void run_f16_fprop(const Problem& p, Schedule schedule, int device, Stream stream);
void run_f16_dgrad(const Problem& p, Schedule schedule, int device, Stream stream);
void run_f16_wgrad(const Problem& p, Schedule schedule, int device, Stream stream);

}  // namespace tilegrid::gemm::sm90
