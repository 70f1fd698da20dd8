// GEMM bindings. Outputs are allocated by the caller (torch) and passed in; the kernel choice
// and the names in epilogue programs cross as strings.
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "convert.h"
#include "tilegrid/core/error.h"
#include "tilegrid/gemm/epilogue/program.h"
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

template <class Enum>
Enum parse_name(const char* what, const std::string& name,
                std::initializer_list<std::pair<const char*, Enum>> names) {
  std::string known;
  for (const auto& [n, value] : names) {
    if (name == n) return value;
    known += known.empty() ? "'" : ", '";
    known += n;
    known += "'";
  }
  throw ValueError(
      detail::concat("matmul_epilogue: ", what, " must be one of ", known, ", got '", name, "'"));
}

epilogue::Combine parse_combine(const std::string& name) {
  using epilogue::Combine;
  return parse_name<Combine>("combine", name,
                             {{"add", Combine::Add}, {"multiply", Combine::Multiply}});
}

epilogue::Activation parse_activation(const std::string& name) {
  using epilogue::Activation;
  return parse_name<Activation>("the activation", name,
                                {{"identity", Activation::Identity},
                                 {"relu", Activation::Relu},
                                 {"sigmoid", Activation::Sigmoid},
                                 {"silu", Activation::Silu},
                                 {"gelu_tanh", Activation::GeluTanh}});
}

epilogue::Reduce parse_reduce(const std::string& name) {
  using epilogue::Reduce;
  return parse_name<Reduce>("the reduction", name,
                            {{"sum", Reduce::Sum},
                             {"sum_squares", Reduce::SumSquares},
                             {"max", Reduce::Max},
                             {"logsumexp", Reduce::LogSumExp}});
}

// A program from Python: a list of (kind, name, tensor, tensor, number, count, flag) tuples,
// each field used or not by its kind (tilegrid/epilogue.py builds them). The ndarrays are
// kept in `keep` for the duration of the call.
epilogue::Program parse_program(const nb::list& steps, std::vector<nb::ndarray<>>& keep) {
  using namespace epilogue;
  Program program;
  for (nb::handle item : steps) {
    const nb::tuple t = nb::cast<nb::tuple>(item);
    const std::string kind = nb::cast<std::string>(t[0]), name = nb::cast<std::string>(t[1]);
    auto tensor = [&](size_t i) {
      if (t[i].is_none()) return TensorView();
      keep.push_back(nb::cast<nb::ndarray<>>(t[i]));
      return as_view(keep.back());
    };
    const double number = nb::cast<double>(t[4]);
    const int64_t count = nb::cast<int64_t>(t[5]);
    const bool flag = nb::cast<bool>(t[6]);
    if (kind == "per_row") {
      program.steps.push_back(PerRow{parse_combine(name), tensor(2)});
    } else if (kind == "per_column") {
      program.steps.push_back(PerColumn{parse_combine(name), tensor(2)});
    } else if (kind == "scalar") {
      program.steps.push_back(Scalar{parse_combine(name), number});
    } else if (kind == "tile") {
      program.steps.push_back(Tile{parse_combine(name), tensor(2)});
    } else if (kind == "elementwise") {
      program.steps.push_back(Elementwise{parse_activation(name)});
    } else if (kind == "elementwise_grad") {
      program.steps.push_back(ElementwiseGrad{parse_activation(name), tensor(2)});
    } else if (kind == "glu") {
      program.steps.push_back(Glu{parse_activation(name)});
    } else if (kind == "glu_grad") {
      program.steps.push_back(GluGrad{parse_activation(name), tensor(2)});
    } else if (kind == "rope") {
      program.steps.push_back(Rope{tensor(2), tensor(3), flag});
    } else if (kind == "row_partials") {
      program.steps.push_back(RowPartials{parse_reduce(name), count, tensor(2)});
    } else if (kind == "column_sum") {
      program.steps.push_back(ColumnSum{tensor(2)});
    } else if (kind == "store") {
      program.steps.push_back(Store{tensor(2)});
    } else {
      throw ValueError(detail::concat("matmul_epilogue: unknown step kind '", kind, "'"));
    }
  }
  return program;
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

  m.def(
      "matmul_epilogue",
      [](nb::ndarray<> a, nb::ndarray<> b, nb::list steps, uintptr_t stream) {
        std::vector<nb::ndarray<>> keep;
        const epilogue::Program program = parse_program(steps, keep);
        matmul_epilogue(as_view(a), as_view(b), program, as_stream(stream));
      },
      nb::arg("a"), nb::arg("b"), nb::arg("steps"), nb::arg("stream") = 0);

  m.def(
      "epilogue_signature",
      [](nb::list steps) {
        std::vector<nb::ndarray<>> keep;
        return epilogue::signature(parse_program(steps, keep));
      },
      nb::arg("steps"));

  m.def(
      "finish_row_partials",
      [](const std::string& op, nb::ndarray<> partials, nb::ndarray<> out, uintptr_t stream) {
        epilogue::finish_row_partials(parse_reduce(op), as_view(partials), as_view(out),
                                      as_stream(stream));
      },
      nb::arg("op"), nb::arg("partials"), nb::arg("out"), nb::arg("stream") = 0);
}

}  // namespace tilegrid::python
