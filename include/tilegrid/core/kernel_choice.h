#pragma once
// Which kernels run: one answer for the whole library. Each kernel family (attention, the
// attention backward, GEMM, sparse convolution) has a requested path, from its environment
// variable or from set_kernel_choice, and each asks one device predicate whether its Hopper
// (sm_90a) kernels can run. The families' dispatchers combine the two with what a kernel
// supports (dtype, head dim, alignment); the Python layer asks the same functions through
// tilegrid.kernel_choice instead of deciding again.
//
//   family              variable                      values (first: the default)
//   attention           TILEGRID_ATTENTION_KERNEL     auto, sm90, portable
//   attention_backward  TILEGRID_ATTENTION_BACKWARD   auto, portable, simt
//   gemm                (none)                        auto, sm90, portable
//   sparse_conv         TILEGRID_SPARSE_CONV_KERNEL   auto, mma, simt
//
// A variable is read once, at the first request of its family; unset or empty means auto, any
// value outside its list is a ValueError at that request (and at every later one until
// set_kernel_choice replaces it). The value stays for the process: set_kernel_choice is the
// one way to change it (tests, benchmarks).
#include <cstdint>
#include <string_view>

namespace tilegrid {

enum class KernelFamily : uint8_t {
  Attention,          // forward and backward
  AttentionBackward,  // the backward only, on top of Attention's request
  Gemm,               // matmul and the linear products with kernel=Auto
  SparseConv,         // forward, input and weight gradients
};
inline constexpr int kKernelFamilies = 4;

// Hopper: the family's sm_90a kernels (sm90). Portable: the kernels for any GPU of sm_80 and
// newer, on tensor cores where the problem allows (attention and GEMM: portable; sparse
// convolution: mma). Simt: CUDA cores only. Auto: Hopper where hopper_kernels_run_on and the
// kernel takes the problem, else Portable.
enum class KernelPath : uint8_t { Auto, Hopper, Portable, Simt };

// The family's requested path: set_kernel_choice's, else its variable's (read at the first
// request). Throws ValueError for a bad value of the variable.
KernelPath requested_kernel(KernelFamily family);

// Overrides the family's request for this process. Throws ValueError for a path the family
// does not take (sparse convolution: no Hopper; the attention backward: no Hopper of its own).
void set_kernel_choice(KernelFamily family, KernelPath path);

// The path the family's variable asks for now (getenv at each call; requested_kernel reads it
// once). A family without a variable: Auto.
KernelPath kernel_path_from_environment(KernelFamily family);

// Spelling, as in the table above. `what` names the value's source in the error message.
std::string_view kernel_family_name(KernelFamily family);
KernelFamily parse_kernel_family(std::string_view name);
std::string_view kernel_path_name(KernelFamily family, KernelPath path);
KernelPath parse_kernel_path(KernelFamily family, std::string_view value, std::string_view what);
// The family's environment variable, or an empty view.
std::string_view kernel_environment_variable(KernelFamily family);

// Whether this build has the family's Hopper kernels (CUDA, the CUTLASS headers, sm_90a).
bool hopper_kernels_built(KernelFamily family);

// Whether CUDA device `device` can run the family's Hopper kernels: the build has them and the
// device is of compute capability 9.0 exactly (sm_90a code runs nowhere else). False without a
// GPU or for an ordinal no device has. Cached per device; no CUDA error is left behind.
bool hopper_kernels_run_on(KernelFamily family, int device);

}  // namespace tilegrid
