#pragma once
// What this copy of the library was compiled with: its version, compilers, the GPU
// architectures of its CUDA kernels and which kernel families are in it. `python -m
// tilegrid.info` prints it next to what it finds at run time.
#include <string>
#include <vector>

namespace tilegrid {

struct BuildInfo {
  std::string version;
  std::string host_compiler;  // e.g. "GNU 13.3.0"
  std::string build_type;     // CMAKE_BUILD_TYPE
  bool with_cuda = false;
  std::string cuda_compiler;       // nvcc's version; empty without CUDA
  std::string cuda_architectures;  // the portable kernels' CMAKE_CUDA_ARCHITECTURES
  std::string cutlass_version;     // empty when the build found no CUTLASS headers
  // Kernel families compiled in, e.g. "attention (portable CUDA)", "attention (sm_90a)".
  std::vector<std::string> kernels;
  // Codecs of compressed .nvdb files that load_nvdb reads: "zip" (zlib), "blosc" (c-blosc).
  std::vector<std::string> nvdb_codecs;
};

const BuildInfo& build_info();

}  // namespace tilegrid
