// Entry point of tilegrid._C: exception translation and the per-layer bindings.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "tilegrid/core/build_info.h"
#include "tilegrid/core/error.h"

namespace nb = nanobind;

NB_MODULE(_C, m) {
  m.doc() = "tilegrid C++/CUDA kernels (use the tilegrid package, not this module)";
  // tilegrid errors surface as the Python exceptions PyTorch users expect.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const tilegrid::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const tilegrid::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const tilegrid::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
#ifdef TILEGRID_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  m.def(
      "build_info",
      [] {
        const tilegrid::BuildInfo& b = tilegrid::build_info();
        nb::dict d;
        d["version"] = b.version;
        d["host_compiler"] = b.host_compiler;
        d["build_type"] = b.build_type;
        d["with_cuda"] = b.with_cuda;
        d["cuda_compiler"] = b.cuda_compiler;
        d["cuda_architectures"] = b.cuda_architectures;
        d["cutlass_version"] = b.cutlass_version;
        d["kernels"] = b.kernels;
        d["nvdb_codecs"] = b.nvdb_codecs;
        return d;
      },
      "What the C++ library was compiled with (version, compilers, CUDA architectures, kernel "
      "families, the codecs of compressed .nvdb files it reads).");
  tilegrid::python::bind_core(m);
  tilegrid::python::bind_attention(m);
  tilegrid::python::bind_fusion(m);
  tilegrid::python::bind_gemm(m);
  tilegrid::python::bind_grid(m);
}
