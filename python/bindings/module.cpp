// Entry point of tilegrid._C: exception translation and the per-layer bindings.
#include <nanobind/nanobind.h>

#include "convert.h"
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
  tilegrid::python::bind_core(m);
  tilegrid::python::bind_attention(m);
  tilegrid::python::bind_fusion(m);
  tilegrid::python::bind_gemm(m);
  tilegrid::python::bind_grid(m);
}
