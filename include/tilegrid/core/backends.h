#pragma once
// Which kernel families ops may choose, in the spirit of torch.backends.cuda's switches.
// Ops pick the fastest kernel a problem allows; turning a family off makes them use the next
// one, which is how tests and benchmarks reach every path on one GPU.
namespace tilegrid {

// Kernels written for Hopper (sm_90a: bulk copies, wgmma...). On by default; they only ever
// run on compute capability 9.x devices. Process-wide and thread-safe.
void set_hopper_kernels_enabled(bool enabled);
bool hopper_kernels_enabled();

}  // namespace tilegrid
