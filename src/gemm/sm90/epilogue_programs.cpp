// The registry of fused epilogue programs: signature -> launcher, and the checks that the
// sm_90a kernels need beyond matmul_epilogue's validation (TMA's 16-byte rows and pointers).
#include "gemm/sm90/epilogue_programs.h"

#include <cstdint>
#include <variant>

#include "core/cuda_check.h"
#include "tilegrid/core/error.h"

namespace tilegrid::gemm::sm90 {
namespace {

constexpr const char* kOp = "matmul_epilogue";

using Launcher = void (*)(const Problem&, const epilogue::Program&, int, Stream);

struct FusedProgram {
  const char* signature;
  Launcher launch;
  Layout layout = Layout::Fprop;  // of a and b: the products the program belongs to
};

constexpr Layout kDgrad = Layout::Dgrad;

// In the order of the fusion issue's priorities; the signatures are those that
// epilogue::signature() prints.
constexpr FusedProgram kPrograms[] = {
    {"per_column(add, bfloat16) > store(bfloat16) > elementwise(gelu_tanh) > store(bfloat16)",
     run_bias_gelu_aux},
    {"per_row(multiply, float32) > store(bfloat16)", run_row_scale},
    {"tile(add, bfloat16) > store(bfloat16) > row_partials(sum_squares, 256)",
     run_residual_sum_squares},
    {"rope > store(bfloat16)", run_rope},
    {"rope(inverse) > store(bfloat16)", run_rope},  // run_rope negates the frequencies
    {"store(bfloat16) > column_sum", run_store_column_sum},
    {"column_sum > store(bfloat16)", run_store_column_sum},
    {"glu(silu) > store(bfloat16)", run_glu},
    {"glu(gelu_tanh) > store(bfloat16)", run_glu},
    {"store(bfloat16) > glu(silu) > store(bfloat16)", run_store_glu},
    {"store(bfloat16) > glu(gelu_tanh) > store(bfloat16)", run_store_glu},
    {"scalar(multiply) > store(bfloat16)", run_scalar},
    {"scalar(add) > store(bfloat16)", run_scalar},
    {"store(bfloat16) > row_partials(sum, 256)", run_store_row_sum},
    {"row_partials(sum, 256) > store(bfloat16)", run_store_row_sum},
    {"store(bfloat16) > row_partials(max, 256)", run_store_row_max},
    {"row_partials(max, 256) > store(bfloat16)", run_store_row_max},
    {"store(bfloat16) > row_partials(logsumexp, 256)", run_store_row_logsumexp},
    {"row_partials(logsumexp, 256) > store(bfloat16)", run_store_row_logsumexp},
    // The backward programs, on the data-gradient products where they occur.
    {"glu_grad(silu, bfloat16) > store(bfloat16)", run_glu_grad, kDgrad},
    {"glu_grad(gelu_tanh, bfloat16) > store(bfloat16)", run_glu_grad, kDgrad},
    {"elementwise_grad(gelu_tanh, bfloat16) > store(bfloat16) > column_sum",
     run_gelu_grad_column_sum, kDgrad},
    {"elementwise_grad(gelu_tanh, bfloat16) > column_sum > store(bfloat16)",
     run_gelu_grad_column_sum, kDgrad},
};

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Fprop:
      return "forward layout (a [M, K] row-major, b = w.t() of a row-major w [N, K])";
    case Layout::Dgrad:
      return "data-gradient layout (a [M, K] row-major, b = w, [K, N] row-major)";
    case Layout::Wgrad:
      break;
  }
  return "weight-gradient layout (a transposed)";
}

std::string available() {
  std::string s;
  for (const FusedProgram& f : kPrograms)
    s += detail::concat("\n  ", f.signature, f.layout == kDgrad ? "  [data-gradient layout]" : "");
  return s;
}

// TMA moves 16-byte units: matrices need rows of a multiple of 8 bf16 elements and 16-byte
// aligned bases; vectors are read in 16-byte pieces too.
constexpr int64_t kAlignElements = 8;
constexpr uintptr_t kAlignBytes = 16;

void check_aligned(int index, const char* arg, const TensorView& t) {
  TG_CHECK_VALUE(reinterpret_cast<uintptr_t>(t.data) % kAlignBytes == 0, kOp, ": step ", index,
                 ": the fused kernels need ", arg,
                 "'s data pointer 16-byte aligned (a view at an offset? call .contiguous())");
}

void check_matrix(int index, const char* arg, const TensorView& t) {
  check_aligned(index, arg, t);
  TG_CHECK_VALUE(t.shape[0] <= 1 || t.strides[0] % kAlignElements == 0, kOp, ": step ", index,
                 ": the fused kernels need ", arg, "'s row stride to be a multiple of ",
                 kAlignElements, " elements (16-byte TMA rows), got ", t.strides[0]);
}

void check_operands(const epilogue::Program& program) {
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const int index = static_cast<int>(i);
    std::visit(
        [&](const auto& s) {
          using S = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<S, epilogue::Store>) check_matrix(index, "out", s.out);
          if constexpr (std::is_same_v<S, epilogue::Tile>) check_matrix(index, "values", s.values);
          if constexpr (std::is_same_v<S, epilogue::ElementwiseGrad> ||
                        std::is_same_v<S, epilogue::GluGrad>)
            check_matrix(index, "input", s.input);
          if constexpr (std::is_same_v<S, epilogue::PerRow> ||
                        std::is_same_v<S, epilogue::PerColumn>)
            check_aligned(index, "values", s.values);
          if constexpr (std::is_same_v<S, epilogue::ColumnSum>) check_aligned(index, "out", s.out);
        },
        program.steps[i]);
  }
}

// A product with M = 0 launches nothing, but its column sums (over no rows) are zeros, as
// the CPU evaluator writes them.
void zero_column_sums(const epilogue::Program& program, int device, Stream stream) {
  for (const epilogue::Step& step : program.steps)
    if (const auto* s = std::get_if<epilogue::ColumnSum>(&step)) {
      CudaDeviceGuard guard(device);
      TG_CUDA_CHECK(cudaMemsetAsync(s->out.data, 0, sizeof(float) * size_t(s->out.shape[0]),
                                    static_cast<cudaStream_t>(stream.handle)));
    }
}

}  // namespace

std::vector<std::string> fused_program_signatures() {
  std::vector<std::string> out;
  for (const FusedProgram& f : kPrograms) out.emplace_back(f.signature);
  return out;
}

void run_fused_program(const Problem& p, const epilogue::Program& program, int device,
                       Stream stream) {
  const std::string sig = epilogue::signature(program);
  const FusedProgram* fused = nullptr;
  for (const FusedProgram& f : kPrograms)
    if (sig == f.signature) fused = &f;
  TG_CHECK_VALUE(fused != nullptr, kOp, ": no fused CUDA kernel for the program ", sig,
                 "; the sm90 kernels compiled in this build are:", available(),
                 "\n(on CPU tensors every program runs, unfused)");
  TG_CHECK_VALUE(p.dtype == DType::BFloat16 && p.layout == fused->layout, kOp,
                 ": the fused kernel of ", sig, " is compiled for bfloat16 a and b in the ",
                 layout_name(fused->layout), ", got ", p.dtype, " a and b in the ",
                 layout_name(p.layout));
  TG_CHECK_VALUE(
      p.n % kAlignElements == 0, kOp,
      ": the fused kernels need N to be a multiple of 8 (16-byte output rows), got N=", p.n);
  TG_CHECK_VALUE(p.k > 0, kOp, ": the fused kernels need K > 0, got K=0");
  check_operands(program);
  if (p.m == 0 || p.n == 0) return zero_column_sums(program, device, stream);
  fused->launch(p, program, device, stream);
}

}  // namespace tilegrid::gemm::sm90
