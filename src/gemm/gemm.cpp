// Matmul front end: validates every argument, works out which dimension of each operand is
// contiguous, and dispatches to the CPU reference or the CUDA back end.
#include "tilegrid/gemm/gemm.h"

#include <cstdint>
#include <limits>

#include "core/cuda_build.h"
#include "gemm/gemm_problem.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "gemm/gemm_cuda.h"
#endif

namespace tilegrid {
namespace {

// TMA moves 16-byte units: rows (and the leading strides between them) must be multiples of
// 8 half-precision elements, and base pointers 16-byte aligned.
constexpr int64_t kAlignElements = 8;
constexpr uintptr_t kAlignBytes = 16;

// Names of the arguments in messages: matmul's own, or those of a linear-layer wrapper.
struct Names {
  const char* op;
  const char* a;
  const char* b;
  const char* out;
};
constexpr Names kMatmul{"matmul", "a", "b", "out"};

// A 2-D operand read along one contiguous dimension: `contiguous_dim` (0 or 1) has stride 1,
// the other dimension steps by `ld` elements.
struct Operand {
  int contiguous_dim = 1;
  int64_t ld = 0;
};

// Whether `t` is contiguous along `dim` with non-overlapping lines, and if so its leading
// stride. A dimension of extent 1 may carry any stride (torch makes such views), and so may
// an empty tensor; the leading stride is then never used and is set to the contiguous extent
// rounded up to 8.
bool contiguous_along(const TensorView& t, int dim, Operand& op) {
  const int other = 1 - dim;
  if (t.numel() > 0 && t.shape[dim] > 1 && t.strides[dim] != 1) return false;
  op.contiguous_dim = dim;
  if (t.numel() == 0 || t.shape[other] <= 1) {
    op.ld = (t.shape[dim] + kAlignElements - 1) / kAlignElements * kAlignElements;
    return true;
  }
  op.ld = t.strides[other];
  return op.ld >= t.shape[dim];
}

std::string dims_name(int contiguous_dim, const char* d0, const char* d1) {
  return contiguous_dim == 0 ? d0 : d1;
}

void check_aligned(const char* op, const char* arg, const TensorView& t) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(t.data) % kAlignBytes;
  TG_CHECK_VALUE(t.numel() == 0 || offset == 0, op, ": ", arg,
                 "'s data pointer must be 16-byte aligned, got an address ",
                 static_cast<int64_t>(offset),
                 " bytes past a 16-byte boundary (a view that starts at an offset? call "
                 ".contiguous() first)");
}

bool aligned_operand(const TensorView& t, const Operand& op) {
  return t.shape[op.contiguous_dim] % kAlignElements == 0 && op.ld % kAlignElements == 0;
}

// Checks an operand or the output; `dim0` and `dim1` name its two dimensions ("M", "K").
// It is read along `preferred` when that dimension is contiguous and aligned, else along the
// other one if `allow_other` and that one is (a [M, 1] view of one token is both).
Operand check_operand(const Names& n, const char* arg, const TensorView& t, const char* dim0,
                      const char* dim1, int preferred, bool allow_other) {
  check_data(n.op, arg, t);
  Operand op, other;
  const bool preferred_ok = contiguous_along(t, preferred, op);
  const bool other_ok = allow_other && contiguous_along(t, 1 - preferred, other);
  if (other_ok && (!preferred_ok || (!aligned_operand(t, op) && aligned_operand(t, other))))
    op = other;
  TG_CHECK_VALUE(preferred_ok || other_ok, n.op, ": ", arg, " must be ",
                 allow_other ? "contiguous along one of its dimensions (row-major, or the "
                               "transpose of a row-major matrix)"
                             : "row-major with a contiguous last dimension",
                 ", got shape ", t.shape, " with strides ", t.strides);
  const int64_t extent = t.shape[op.contiguous_dim];
  TG_CHECK_VALUE(extent % kAlignElements == 0, n.op, ": ", arg, " is contiguous along ",
                 dims_name(op.contiguous_dim, dim0, dim1), ", which must be a multiple of ",
                 kAlignElements, " (16-byte rows), got ", extent, " (shape ", t.shape, ")");
  TG_CHECK_VALUE(op.ld % kAlignElements == 0, n.op, ": the leading stride of ", arg,
                 " must be a multiple of ", kAlignElements, " elements (16 bytes), got ", op.ld,
                 " (shape ", t.shape, ", strides ", t.strides, ")");
  check_aligned(n.op, arg, t);
  return op;
}

// a and b: dtypes, shapes, devices and which dimension of each is contiguous.
gemm::Problem check_inputs(const Names& n, const TensorView& a, const TensorView& b) {
  check_dtype(n.op, n.a, a, {DType::BFloat16, DType::Float16});
  check_dtype(n.op, n.b, b, {a.dtype});
  check_ndim(n.op, n.a, a, 2);
  check_ndim(n.op, n.b, b, 2);
  check_same_device(n.op, n.b, b, n.a, a);

  gemm::Problem p;
  p.m = a.shape[0];
  p.k = a.shape[1];
  p.n = b.shape[1];
  TG_CHECK_VALUE(b.shape[0] == p.k, n.op, ": ", n.b, " must have ", p.k, " rows to match ", n.a,
                 " of shape ", a.shape, " ([M, K]), got shape ", b.shape);
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
  TG_CHECK_VALUE(p.m <= kMaxDim && p.n <= kMaxDim && p.k <= kMaxDim, n.op,
                 ": M, N and K must each be below 2^31, got M=", p.m, " N=", p.n, " K=", p.k);

  // a: K-contiguous preferred (forward, data gradient), else M-contiguous (weight gradient).
  const Operand oa = check_operand(n, n.a, a, "M", "K", 1, true);
  // b: with an M-contiguous a only N-contiguous b has a kernel; otherwise either.
  const bool a_k = oa.contiguous_dim == 1;
  if (!a_k) {
    Operand probe;
    TG_CHECK_VALUE(contiguous_along(b, 1, probe) || !contiguous_along(b, 0, probe), n.op, ": ", n.a,
                   " and ", n.b,
                   " are both transposed views (contiguous along M and K); make one of them "
                   "contiguous, got strides ",
                   a.strides, " and ", b.strides);
  }
  const Operand ob = check_operand(n, n.b, b, "K", "N", 1, a_k);

  p.layout = !a_k                     ? gemm::Layout::Wgrad
             : ob.contiguous_dim == 1 ? gemm::Layout::Dgrad
                                      : gemm::Layout::Fprop;
  p.dtype = a.dtype;
  p.a = a.data;
  p.b = b.data;
  p.lda = oa.ld;
  p.ldb = ob.ld;
  return p;
}

gemm::Problem make_problem(const Names& n, const TensorView& a, const TensorView& b,
                           const TensorView& out, MatmulKernel kernel) {
  gemm::Problem p = check_inputs(n, a, b);
  check_dtype(n.op, n.out, out, {a.dtype, DType::Float32});
  check_ndim(n.op, n.out, out, 2);
  check_same_device(n.op, n.out, out, n.a, a);
  check_shape(n.op, n.out, out, {p.m, p.n});
  const Operand oo = check_operand(n, n.out, out, "M", "N", 1, false);
  p.out_dtype = out.dtype;
  p.out = out.data;
  p.ldo = oo.ld;

  if (a.device.is_cpu())
    TG_CHECK_VALUE(kernel == MatmulKernel::Auto, n.op,
                   ": only kernel=Auto runs on the CPU; the others need tensors on a CUDA device");
  return p;
}

void run(const Names& n, const TensorView& a, const TensorView& b, const TensorView& out,
         Stream stream, MatmulKernel kernel) {
  const gemm::Problem p = make_problem(n, a, b, out, kernel);
  if (p.m == 0 || p.n == 0) return;
  if (a.device.is_cpu()) return gemm::matmul_cpu(p);
  require_cuda_build(n.op);
#ifdef TILEGRID_WITH_CUDA
  gemm::matmul_cuda(p, kernel, a.device.index, stream);
#endif
}

// A [rows, cols] row-major matrix viewed as its [cols, rows] transpose.
TensorView transposed(const TensorView& t) {
  return TensorView(t.data, t.dtype, t.device, {t.shape[1], t.shape[0]},
                    {t.strides[1], t.strides[0]});
}

// The wrappers take row-major tensors; their shapes are checked here so that a mismatch is
// reported in the layer's terms (in/out features) rather than the matmul's.
void check_linear_operands(const char* op, const char* arg0, const TensorView& t0, const char* arg1,
                           const TensorView& t1, int dim0, int dim1, const char* what) {
  check_ndim(op, arg0, t0, 2);
  check_ndim(op, arg1, t1, 2);
  TG_CHECK_VALUE(t0.shape[dim0] == t1.shape[dim1], op, ": ", arg0, " and ", arg1, " must agree on ",
                 what, ", got shapes ", t0.shape, " and ", t1.shape);
  check_last_dim_contiguous(op, arg0, t0);
  check_last_dim_contiguous(op, arg1, t1);
}

}  // namespace

namespace gemm {

Problem check_product(const char* op, const TensorView& a, const TensorView& b) {
  return check_inputs({op, "a", "b", "out"}, a, b);
}

}  // namespace gemm

void matmul(const TensorView& a, const TensorView& b, const TensorView& out, Stream stream,
            MatmulKernel kernel) {
  run(kMatmul, a, b, out, stream, kernel);
}

void linear_forward(const TensorView& x, const TensorView& weight, const TensorView& y,
                    Stream stream) {
  constexpr const char* kOp = "linear_forward";
  check_linear_operands(kOp, "x", x, "weight", weight, 1, 1, "in_features (their last dimension)");
  run({kOp, "x", "weight^T", "y"}, x, transposed(weight), y, stream, MatmulKernel::Auto);
}

void linear_backward_input(const TensorView& dy, const TensorView& weight, const TensorView& dx,
                           Stream stream) {
  constexpr const char* kOp = "linear_backward_input";
  check_linear_operands(kOp, "dy", dy, "weight", weight, 1, 0,
                        "out_features (dy's last dimension, weight's first)");
  run({kOp, "dy", "weight", "dx"}, dy, weight, dx, stream, MatmulKernel::Auto);
}

void linear_backward_weight(const TensorView& dy, const TensorView& x, const TensorView& dweight,
                            Stream stream) {
  constexpr const char* kOp = "linear_backward_weight";
  check_linear_operands(kOp, "dy", dy, "x", x, 0, 0, "the number of rows (tokens)");
  run({kOp, "dy^T", "x", "dweight"}, transposed(dy), x, dweight, stream, MatmulKernel::Auto);
}

std::string describe_matmul(const TensorView& a, const TensorView& b, const TensorView& out,
                            MatmulKernel kernel) {
  [[maybe_unused]] const gemm::Problem p = make_problem(kMatmul, a, b, out, kernel);
  if (a.device.is_cpu()) return "cpu reference (blocked, float32 accumulation)";
  require_cuda_build(kMatmul.op);
#ifdef TILEGRID_WITH_CUDA
  return gemm::describe_cuda(p, kernel, a.device.index);
#else
  return "";
#endif
}

}  // namespace tilegrid
