// GEMM bindings. The output is allocated by the caller (torch) and passed in; the kernel
// choice crosses as a string.
#include <nanobind/stl/string.h>

#include <string>

#include "convert.h"
#include "tilegrid/core/error.h"
#include "tilegrid/gemm/gemm.h"

namespace tilegrid::python {
namespace {

MatmulKernel parse_kernel(const std::string& name) {
  if (name == "auto") return MatmulKernel::Auto;
  if (name == "sm90_cooperative") return MatmulKernel::Sm90Cooperative;
  if (name == "sm90_pingpong") return MatmulKernel::Sm90Pingpong;
  if (name == "portable") return MatmulKernel::Portable;
  throw ValueError(detail::concat(
      "matmul: kernel must be 'auto', 'sm90_cooperative', 'sm90_pingpong' or 'portable', got '",
      name, "'"));
}

}  // namespace

void bind_gemm(nb::module_& m) {
  m.def(
      "matmul",
      [](nb::ndarray<> a, nb::ndarray<> b, nb::ndarray<> out, uintptr_t stream,
         const std::string& kernel) {
        matmul(as_view(a), as_view(b), as_view(out), as_stream(stream), parse_kernel(kernel));
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("stream") = 0,
      nb::arg("kernel") = "auto");

  m.def(
      "describe_matmul",
      [](nb::ndarray<> a, nb::ndarray<> b, nb::ndarray<> out, const std::string& kernel) {
        return describe_matmul(as_view(a), as_view(b), as_view(out), parse_kernel(kernel));
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("kernel") = "auto");
}

}  // namespace tilegrid::python
