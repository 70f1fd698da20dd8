// The families' requests and the Hopper device predicate (tilegrid/core/kernel_choice.h).
#include "tilegrid/core/kernel_choice.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "tilegrid/core/error.h"
#ifdef TILEGRID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tilegrid {
namespace {

struct FamilyInfo {
  const char* name;
  const char* variable;  // "" where the family has none
  // The spelling of each KernelPath, indexed by it; nullptr where the family has no such path.
  const char* paths[4];
  bool hopper_built;
};

#ifdef TILEGRID_WITH_SM90_ATTENTION
constexpr bool kSm90Attention = true;
#else
constexpr bool kSm90Attention = false;
#endif
#ifdef TILEGRID_WITH_SM90_GEMM
constexpr bool kSm90Gemm = true;
#else
constexpr bool kSm90Gemm = false;
#endif
#ifdef TILEGRID_WITH_SM90_CONV
constexpr bool kSm90Conv = true;
#else
constexpr bool kSm90Conv = false;
#endif

// Indexed by KernelFamily.
constexpr FamilyInfo kFamilies[kKernelFamilies] = {
    {"attention",
     "TILEGRID_ATTENTION_KERNEL",
     {"auto", "sm90", "portable", nullptr},
     kSm90Attention},
    {"attention_backward",
     "TILEGRID_ATTENTION_BACKWARD",
     {"auto", nullptr, "portable", "simt"},
     kSm90Attention},
    {"gemm", "", {"auto", "sm90", "portable", nullptr}, kSm90Gemm},
    {"sparse_conv", "TILEGRID_SPARSE_CONV_KERNEL", {"auto", nullptr, "mma", "simt"}, kSm90Conv},
};

const FamilyInfo& info(KernelFamily family) {
  return kFamilies[int(family)];
}

// "auto, sm90 or portable"
std::string path_list(const FamilyInfo& f) {
  std::string list;
  int left = 0;
  for (const char* p : f.paths) left += p != nullptr;
  for (const char* p : f.paths) {
    if (p == nullptr) continue;
    list += p;
    --left;
    if (left > 1) list += ", ";
    if (left == 1) list += " or ";
  }
  return list;
}

// Each family's request as an int KernelPath, or kUnread before its variable has been read.
constexpr int kUnread = -1;
std::atomic<int> requests[kKernelFamilies] = {kUnread, kUnread, kUnread, kUnread};

#ifdef TILEGRID_WITH_CUDA
// Whether `device` is of compute capability 9.0. A failed query (no GPU, no driver, an ordinal
// past the last device) answers false and is cleared: the runtime would otherwise hand it to
// the next cudaGetLastError, i.e. to some later launch check.
bool compute_capability_90(int device) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cached[kCachedDevices] = {};  // 0 unknown, 1 yes, 2 no
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable && cached[device] != 0) return cached[device] == 1;
  if (device < 0) return false;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const bool yes = major == 9 && minor == 0;
  if (cacheable) cached[device] = yes ? 1 : 2;
  return yes;
}
#endif

}  // namespace

std::string_view kernel_family_name(KernelFamily family) {
  return info(family).name;
}

KernelFamily parse_kernel_family(std::string_view name) {
  for (int i = 0; i < kKernelFamilies; ++i)
    if (name == kFamilies[i].name) return KernelFamily(i);
  throw ValueError(detail::concat(
      "kernel family must be attention, attention_backward, gemm or sparse_conv, got '", name,
      "'"));
}

std::string_view kernel_path_name(KernelFamily family, KernelPath path) {
  const char* name = info(family).paths[int(path)];
  return name != nullptr ? name : "";
}

KernelPath parse_kernel_path(KernelFamily family, std::string_view value, std::string_view what) {
  const FamilyInfo& f = info(family);
  if (value.empty()) return KernelPath::Auto;
  for (int i = 0; i < 4; ++i)
    if (f.paths[i] != nullptr && value == f.paths[i]) return KernelPath(i);
  throw ValueError(detail::concat(what, " must be ", path_list(f), ", got '", value, "'"));
}

std::string_view kernel_environment_variable(KernelFamily family) {
  return info(family).variable;
}

KernelPath kernel_path_from_environment(KernelFamily family) {
  const FamilyInfo& f = info(family);
  if (*f.variable == '\0') return KernelPath::Auto;
  const char* value = std::getenv(f.variable);
  return parse_kernel_path(family, value == nullptr ? "" : value, f.variable);
}

KernelPath requested_kernel(KernelFamily family) {
  std::atomic<int>& request = requests[int(family)];
  int path = request.load(std::memory_order_relaxed);
  if (path == kUnread) {
    // A set_kernel_choice between the read and the exchange wins.
    const int from_environment = int(kernel_path_from_environment(family));
    request.compare_exchange_strong(path, from_environment, std::memory_order_relaxed);
    path = request.load(std::memory_order_relaxed);
  }
  return KernelPath(path);
}

void set_kernel_choice(KernelFamily family, KernelPath path) {
  const FamilyInfo& f = info(family);
  constexpr const char* kPathNames[] = {"Auto", "Hopper", "Portable", "Simt"};
  TG_CHECK_VALUE(f.paths[int(path)] != nullptr, "set_kernel_choice: ", f.name, " has no ",
                 kPathNames[int(path)], " path (it takes ", path_list(f), ")");
  requests[int(family)].store(int(path), std::memory_order_relaxed);
}

bool hopper_kernels_built(KernelFamily family) {
  return info(family).hopper_built;
}

bool hopper_kernels_run_on(KernelFamily family, int device) {
#ifdef TILEGRID_WITH_CUDA
  return hopper_kernels_built(family) && compute_capability_90(device);
#else
  (void)family;
  (void)device;
  return false;
#endif
}

}  // namespace tilegrid
