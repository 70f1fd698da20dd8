#include "tilegrid/core/build_info.h"

#include <algorithm>
#include <string_view>

#include "build_info_config.h"

namespace tilegrid {

const BuildInfo& build_info() {
  static const BuildInfo info = [] {
    BuildInfo b;
    b.version = TILEGRID_VERSION_STRING;
    b.host_compiler = TILEGRID_HOST_COMPILER;
    b.build_type = TILEGRID_BUILD_TYPE;
    b.cuda_compiler = TILEGRID_CUDA_COMPILER;
    b.cuda_architectures = TILEGRID_CUDA_ARCHITECTURES;
    b.cutlass_version = TILEGRID_CUTLASS_VERSION;
#ifdef TILEGRID_WITH_CUDA
    b.with_cuda = true;
    b.kernels.emplace_back("core, fusion, gemm and grid (portable CUDA)");
#endif
#ifdef TILEGRID_WITH_ATTENTION_CUDA
    b.kernels.emplace_back("attention (portable CUDA)");
#endif
#ifdef TILEGRID_WITH_SM90_ATTENTION
    b.kernels.emplace_back("attention (sm_90a)");
#endif
#ifdef TILEGRID_WITH_SM90_GEMM
    b.kernels.emplace_back("gemm and fused epilogue programs (sm_90a)");
#endif
#ifdef TILEGRID_WITH_SM90_CONV
    b.kernels.emplace_back("sparse convolution (sm_90a)");
#endif
    // CMake's list of the codecs it linked, "zip;blosc" or less.
    for (std::string_view list = TILEGRID_NVDB_CODECS; !list.empty();) {
      const size_t end = std::min(list.find(';'), list.size());
      b.nvdb_codecs.emplace_back(list.substr(0, end));
      list.remove_prefix(std::min(end + 1, list.size()));
    }
    return b;
  }();
  return info;
}

}  // namespace tilegrid
