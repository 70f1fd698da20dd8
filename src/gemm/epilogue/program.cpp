// Epilogue programs: validation of every step against the product and its operands, the
// program signature, and dispatch (the CPU evaluator, or a fused sm_90a kernel found by the
// program's signature).
#include "tilegrid/gemm/epilogue/program.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "gemm/epilogue/evaluate_cpu.h"
#include "gemm/gemm_problem.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "gemm/epilogue/epilogue_cuda.h"
#endif
#ifdef TILEGRID_WITH_SM90_GEMM
#include "core/cuda_launch.h"
#include "gemm/sm90/epilogue_programs.h"
#include "tilegrid/core/kernel_choice.h"
#endif

namespace tilegrid::epilogue {
namespace {

constexpr const char* kOp = "matmul_epilogue";

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
// C++20 deduces this from an aggregate's initialiser; clang before 17 needs the guide spelled.
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

const char* name(Combine c) {
  return c == Combine::Add ? "add" : "multiply";
}

const char* name(Activation a) {
  switch (a) {
    case Activation::Relu:
      return "relu";
    case Activation::Sigmoid:
      return "sigmoid";
    case Activation::Silu:
      return "silu";
    case Activation::GeluTanh:
      return "gelu_tanh";
    case Activation::Identity:
      break;
  }
  return "identity";
}

const char* name(Reduce r) {
  switch (r) {
    case Reduce::SumSquares:
      return "sum_squares";
    case Reduce::Max:
      return "max";
    case Reduce::LogSumExp:
      return "logsumexp";
    case Reduce::Sum:
      break;
  }
  return "sum";
}

// An operand's dtype in a signature, by name.
std::string dtype_name(DType d) { return detail::concat(d); }

// `dtype(d)` names an operand's dtype: dtype_name, or "T" where the caller asks for the
// element-generic signature.
template <class NameDType>
std::string step_signature(const Step& step, const NameDType& dtype) {
  using detail::concat;
  return std::visit(
      Overloaded{
          [&](const PerRow& s) {
            return concat("per_row(", name(s.combine), ", ", dtype(s.values.dtype), ")");
          },
          [&](const PerColumn& s) {
            return concat("per_column(", name(s.combine), ", ", dtype(s.values.dtype), ")");
          },
          [](const Scalar& s) { return concat("scalar(", name(s.combine), ")"); },
          [&](const Tile& s) {
            return concat("tile(", name(s.combine), ", ", dtype(s.values.dtype), ")");
          },
          [](const Elementwise& s) { return concat("elementwise(", name(s.fn), ")"); },
          [&](const ElementwiseGrad& s) {
            return concat("elementwise_grad(", name(s.fn), ", ", dtype(s.input.dtype), ")");
          },
          [](const Glu& s) { return concat("glu(", name(s.act), ")"); },
          [&](const GluGrad& s) {
            return concat("glu_grad(", name(s.act), ", ", dtype(s.input.dtype), ")");
          },
          [](const Rope& s) { return std::string(s.inverse ? "rope(inverse)" : "rope"); },
          [](const RowPartials& s) {
            return concat("row_partials(", name(s.op), ", ", s.tile_n, ")");
          },
          [](const ColumnSum&) { return std::string("column_sum"); },
          [&](const Store& s) { return concat("store(", dtype(s.out.dtype), ")"); },
      },
      step);
}

template <class NameDType>
std::string join_signature(const Program& program, const NameDType& dtype) {
  std::string s;
  for (const Step& step : program.steps) {
    if (!s.empty()) s += " > ";
    s += step_signature(step, dtype);
  }
  return s.empty() ? "(empty)" : s;
}

// Checks of one step's operands; messages start "matmul_epilogue: step 2 (glu_grad)".
class StepChecker {
 public:
  StepChecker(const TensorView& a, int index, const Step& step)
      : a_(a), where_(detail::concat(kOp, ": step ", index, " (", step_name(step), ")")) {}

  const std::string& where() const { return where_; }

  // A contiguous vector of `length` elements.
  void vector(const char* arg, const TensorView& t, int64_t length,
              std::initializer_list<DType> dtypes) {
    common(arg, t, dtypes);
    check_shape(where_, arg, t, {length});
    check_contiguous(where_, arg, t);
  }

  // A row-major [rows, cols] matrix (its row stride may exceed cols).
  void matrix(const char* arg, const TensorView& t, int64_t rows, int64_t cols,
              std::initializer_list<DType> dtypes) {
    common(arg, t, dtypes);
    check_shape(where_, arg, t, {rows, cols});
    check_last_dim_contiguous(where_, arg, t);
    TG_CHECK_VALUE(rows <= 1 || t.strides[0] >= cols, where_, ": rows of ", arg,
                   " overlap (row stride ", t.strides[0], " < ", cols, " columns)");
  }

 private:
  static std::string step_name(const Step& step) {
    const std::string s = step_signature(step, dtype_name);
    return s.substr(0, s.find('('));
  }

  void common(const char* arg, const TensorView& t, std::initializer_list<DType> dtypes) {
    check_dtype(where_, arg, t, dtypes);
    check_same_device(where_, arg, t, "a", a_);
    check_data(where_, arg, t);
  }

  const TensorView& a_;
  std::string where_;
};

constexpr std::initializer_list<DType> kFloats = {DType::Float32, DType::Float16, DType::BFloat16};

// Walks the program, checking each step against the value tile's current width; returns
// whether some step writes an output.
bool check_steps(const Program& program, const TensorView& a, int64_t m, int64_t n) {
  int64_t width = n;
  bool writes = false;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    StepChecker c(a, static_cast<int>(i), program.steps[i]);
    auto even_width = [&] {
      TG_CHECK_VALUE(width % 2 == 0, c.where(), ": pairs of columns need an even width, got ",
                     width);
    };
    std::visit(
        Overloaded{
            [&](const PerRow& s) { c.vector("values", s.values, m, kFloats); },
            [&](const PerColumn& s) { c.vector("values", s.values, width, kFloats); },
            [&](const Scalar&) {},
            [&](const Tile& s) { c.matrix("values", s.values, m, width, kFloats); },
            [&](const Elementwise&) {},
            [&](const ElementwiseGrad& s) { c.matrix("input", s.input, m, width, kFloats); },
            [&](const Glu&) {
              even_width();
              width /= 2;
            },
            [&](const GluGrad& s) {
              c.matrix("input", s.input, m, 2 * width, kFloats);
              width *= 2;
            },
            [&](const Rope& s) {
              even_width();
              c.vector("positions", s.positions, m, {DType::Int32, DType::Int64, DType::Float32});
              c.vector("frequencies", s.frequencies, width / 2, {DType::Float32});
            },
            [&](const RowPartials& s) {
              TG_CHECK_VALUE(s.tile_n >= 1, c.where(), ": tile_n must be >= 1, got ", s.tile_n);
              c.matrix("partials", s.partials, m, (width + s.tile_n - 1) / s.tile_n,
                       {DType::Float32});
              check_contiguous(c.where(), "partials", s.partials);
              writes = true;
            },
            [&](const ColumnSum& s) {
              c.vector("out", s.out, width, {DType::Float32});
              writes = true;
            },
            [&](const Store& s) {
              c.matrix("out", s.out, m, width, kFloats);
              writes = true;
            },
        },
        program.steps[i]);
  }
  return writes;
}

}  // namespace

std::string signature(const Program& program) {
  return join_signature(program, dtype_name);
}

std::string signature(const Program& program, DType element) {
  return join_signature(program, [element](DType d) {
    return d == element ? std::string("T") : dtype_name(d);
  });
}

void finish_row_partials(Reduce op, const TensorView& partials, const TensorView& out,
                         Stream stream) {
  constexpr const char* kFinish = "finish_row_partials";
  check_dtype(kFinish, "partials", partials, {DType::Float32});
  check_ndim(kFinish, "partials", partials, 2);
  check_contiguous(kFinish, "partials", partials);
  check_data(kFinish, "partials", partials);
  check_dtype(kFinish, "out", out, {DType::Float32});
  check_same_device(kFinish, "out", out, "partials", partials);
  check_shape(kFinish, "out", out, {partials.shape[0]});
  check_contiguous(kFinish, "out", out);
  check_data(kFinish, "out", out);
  const int64_t rows = partials.shape[0], count = partials.shape[1];
  if (rows == 0) return;
  if (partials.device.is_cpu())
    return finish_row_partials_cpu(op, partials.data_ptr<const float>(), rows, count,
                                   out.data_ptr<float>());
#ifdef TILEGRID_WITH_CUDA
  finish_row_partials_cuda(op, partials.data_ptr<const float>(), rows, count, out.data_ptr<float>(),
                           partials.device.index, stream);
#else
  throw Error(
      detail::concat(kFinish, ": tilegrid was built without CUDA; tensors are on a CUDA device"));
#endif
}

}  // namespace tilegrid::epilogue

namespace tilegrid {

void matmul_epilogue(const TensorView& a, const TensorView& b, const epilogue::Program& program,
                     Stream stream) {
  const gemm::Problem p = gemm::check_product(epilogue::kOp, a, b);
  TG_CHECK_VALUE(epilogue::check_steps(program, a, p.m, p.n), epilogue::kOp,
                 ": the program writes nothing (it needs a store, row_partials or column_sum "
                 "step), got ",
                 epilogue::signature(program));
  if (a.device.is_cpu()) return epilogue::evaluate_cpu(p, program);
#ifdef TILEGRID_WITH_SM90_GEMM
  // Fused programs exist only as sm_90a kernels; on other GPUs the program would have to run
  // unfused, which is what the fusion is for avoiding, so that is an error, not a fallback.
  const int device = a.device.index;
  if (!hopper_kernels_run_on(KernelFamily::Gemm, device)) {
    const int cc = cuda::compute_capability(device);
    throw ValueError(detail::concat(
        epilogue::kOp,
        ": fused epilogue programs run on compute capability 9.0 GPUs (H100/H200) only, cuda:",
        device, " has ", cc / 10, ".", cc % 10, "; run the program on CPU tensors"));
  }
  gemm::sm90::run_fused_program(p, program, device, stream);
#else
  (void)stream;
  throw Error(detail::concat(epilogue::kOp, ": no fused CUDA kernel for the program ",
                             epilogue::signature(program),
                             ": this build of tilegrid has no sm90 kernels (built without CUDA or "
                             "without the CUTLASS headers); run it on CPU tensors"));
#endif
}

}  // namespace tilegrid
