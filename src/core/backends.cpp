#include "tilegrid/core/backends.h"

#include <atomic>

namespace tilegrid {
namespace {
std::atomic<bool> hopper_enabled{true};
}  // namespace

void set_hopper_kernels_enabled(bool enabled) { hopper_enabled.store(enabled); }
bool hopper_kernels_enabled() { return hopper_enabled.load(); }

}  // namespace tilegrid
