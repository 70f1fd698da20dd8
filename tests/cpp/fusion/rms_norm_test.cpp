#include "tilegrid/fusion/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "test_util.h"

namespace tilegrid {
namespace {

using testing::random_tensor;
using testing::to_doubles;

struct Reference {
  std::vector<double> y, rstd, dx, dweight;
};

// Float64 RMSNorm forward and backward, written from the formulas independently of the
// library's CPU path.
Reference reference(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& dy, int64_t rows, int64_t hidden, double eps) {
  Reference r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.rstd.resize(rows);
  r.dweight.assign(hidden, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0, dot = 0;
    for (int64_t c = 0; c < hidden; ++c) ss += x[i * hidden + c] * x[i * hidden + c];
    const double rstd = 1.0 / std::sqrt(ss / hidden + eps);
    r.rstd[i] = rstd;
    for (int64_t c = 0; c < hidden; ++c) {
      const double xhat = x[i * hidden + c] * rstd, g = dy[i * hidden + c] * w[c];
      r.y[i * hidden + c] = xhat * w[c];
      dot += xhat * g;
      r.dweight[c] += dy[i * hidden + c] * xhat;
    }
    for (int64_t c = 0; c < hidden; ++c) {
      const double xhat = x[i * hidden + c] * rstd, g = dy[i * hidden + c] * w[c];
      r.dx[i * hidden + c] = rstd * (g - xhat * dot / hidden);
    }
  }
  return r;
}

// max |got - want| / (atol + rtol * |want|) must stay <= 1; NaN (an unwritten, poisoned
// element) always fails.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = atol + rtol * std::fabs(want[i]);
    ASSERT_TRUE(std::fabs(got[i] - want[i]) <= bound)
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

// Tolerances: one rounding of the output to the storage type (2^-8 bf16, 2^-11 fp16) on
// top of float32 math; dweight sums `rows` products, so it gets a looser absolute term.
double rtol_for(DType d) {
  return d == DType::BFloat16 ? 1.6e-2 : d == DType::Float16 ? 2e-3 : 1e-5;
}

using Case = std::tuple<DType, int64_t /*hidden*/, bool /*fp32 weight*/, bool /*cuda*/>;

class RmsNormMatchesFloat64Reference : public ::testing::TestWithParam<Case> {};

TEST_P(RmsNormMatchesFloat64Reference, ForwardAndBackward) {
  const auto [dtype, hidden, fp32_weight, on_cuda] = GetParam();
  if (on_cuda) TG_SKIP_WITHOUT_GPU();
  const Device device = on_cuda ? Device::cuda(0) : Device::cpu();
  const int64_t rows = 37;
  const double eps = 1e-6;
  const DType wtype = fp32_weight ? DType::Float32 : dtype;

  Tensor x = random_tensor({rows, hidden}, dtype);
  Tensor w = random_tensor({hidden}, wtype, 1.f, 0.5f);
  Tensor dy = random_tensor({rows, hidden}, dtype);
  Reference ref = reference(to_doubles(x), to_doubles(w), to_doubles(dy), rows, hidden, eps);

  Tensor xd = testing::to_device(x, device), wd = testing::to_device(w, device),
         dyd = testing::to_device(dy, device);
  Tensor y = Tensor::empty({rows, hidden}, dtype, device);
  Tensor rstd = Tensor::empty({rows}, DType::Float32, device);
  Tensor dx = Tensor::empty({rows, hidden}, dtype, device);
  Tensor dw = Tensor::empty({hidden}, wtype, device);
  for (const Tensor* t : {&y, &rstd, &dx, &dw}) testing::poison(*t);

  rms_norm_forward(xd, wd.view(), eps, y, rstd.view());
  rms_norm_backward(dyd, xd, wd.view(), rstd, dx, dw.view());

  const double rtol = rtol_for(dtype);
  expect_close(to_doubles(rstd), ref.rstd, 0, 1e-5, "rstd");
  expect_close(to_doubles(y), ref.y, 1e-6, rtol, "y");
  // dx subtracts two terms of similar size: the absolute term scales with rstd * |g|.
  expect_close(to_doubles(dx), ref.dx, 4 * rtol, rtol, "dx");
  expect_close(to_doubles(dw), ref.dweight, 0.1 * rtol * std::sqrt(double(rows)) * 10,
               rtol_for(wtype) + 1e-4, "dweight");

  // A residual gradient, added to dx in the same pass; dx may be the residual gradient itself.
  Tensor dres = random_tensor({rows, hidden}, dtype);
  Tensor dx_res = testing::to_device(dres, device);
  rms_norm_backward(dyd, xd, wd.view(), rstd, dx_res, dw.view(), {}, dx_res.view());
  std::vector<double> want = ref.dx;
  const std::vector<double> added = to_doubles(dres);
  for (size_t i = 0; i < want.size(); ++i) want[i] += added[i];
  expect_close(to_doubles(dx_res), want, 4 * rtol, rtol, "dx + dresidual");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [dtype, hidden, fp32_weight, on_cuda] = info.param;
  return std::string(name(dtype)) + "_h" + std::to_string(hidden) +
         (fp32_weight ? "_fp32weight" : "") + (on_cuda ? "_cuda" : "_cpu");
}

// Hidden sizes chosen to reach every CUDA kernel: one element per access (1, 7, 4095 in
// registers; 4097 streaming), 16-byte accesses with several rows a block (64), one row over
// several warps (768), rows of exactly 256 or 512 threads' 16-byte vectors (2048, 4096, 8192
// in half types with a weight: the forward's row kernel), and rows too long for registers
// (40000: streaming kernels).
INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsNormMatchesFloat64Reference,
    ::testing::Combine(::testing::Values(DType::Float32, DType::Float16, DType::BFloat16),
                       ::testing::Values(1, 7, 64, 768, 2048, 4095, 4096, 4097, 8192, 40000),
                       ::testing::Values(false, true), ::testing::Values(false, true)),
    case_name);

TEST(RmsNorm, ForwardWithoutWeightOrRstd) {
  Tensor x = random_tensor({3, 5}, DType::Float32);
  Tensor y = Tensor::empty({3, 5}, DType::Float32, Device::cpu());
  rms_norm_forward(x, std::nullopt, 0.0, y, std::nullopt);
  std::vector<double> xv = to_doubles(x), yv = to_doubles(y);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int c = 0; c < 5; ++c) ss += yv[r * 5 + c] * yv[r * 5 + c];
    EXPECT_NEAR(ss / 5, 1.0, 1e-5);  // unit root-mean-square after normalisation
  }
}

TEST(RmsNorm, BadInputsGetClearErrors) {
  Tensor x = random_tensor({4, 8}, DType::BFloat16);
  Tensor y = Tensor::empty({4, 8}, DType::BFloat16, Device::cpu());
  Tensor w7 = random_tensor({7}, DType::BFloat16);
  Tensor xi = Tensor::empty({4, 8}, DType::Int64, Device::cpu());
  Tensor wf16 = random_tensor({8}, DType::Float16);

  auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message([&] { rms_norm_forward(x, w7.view(), 1e-6, y, std::nullopt); }),
            "rms_norm_forward: weight must have shape [8], got [7]");
  EXPECT_EQ(message([&] { rms_norm_forward(xi, std::nullopt, 1e-6, y, std::nullopt); }),
            "rms_norm_forward: x must be float32, float16 or bfloat16, got int64");
  EXPECT_EQ(message([&] { rms_norm_forward(x, wf16.view(), 1e-6, y, std::nullopt); }),
            "rms_norm_forward: weight must be bfloat16 or float32, got float16");
  TensorView transposed(x.data(), DType::BFloat16, Device::cpu(), {8, 4}, {1, 8});
  EXPECT_NE(message([&] {
              rms_norm_forward(transposed, std::nullopt, 1e-6, y, std::nullopt);
            }).find("must have a contiguous last dimension"),
            std::string::npos);
  TensorView on_gpu(x.data(), DType::BFloat16, Device::cuda(0), {4, 8});
  EXPECT_EQ(
      message([&] { rms_norm_forward(x, std::nullopt, 1e-6, TensorView(on_gpu), std::nullopt); }),
      "rms_norm_forward: y is on cuda:0 but x is on cpu; all tensors must be on one device");
  EXPECT_THROW(rms_norm_forward(x, std::nullopt, -1.0, y, std::nullopt), ValueError);
}

TEST(RmsNorm, StridedRowsAreRead) {
  // Rows 0, 2, 4 of a [6, 16] tensor: a view with row stride 32.
  Tensor base = random_tensor({6, 16}, DType::Float32);
  TensorView rows(base.data(), DType::Float32, Device::cpu(), {3, 16}, {32, 1});
  Tensor y = Tensor::empty({3, 16}, DType::Float32, Device::cpu());
  rms_norm_forward(rows, std::nullopt, 1e-6, y, std::nullopt);
  std::vector<double> b = to_doubles(base), yv = to_doubles(y);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int c = 0; c < 16; ++c) ss += b[2 * r * 16 + c] * b[2 * r * 16 + c];
    EXPECT_NEAR(yv[r * 16 + 3], b[2 * r * 16 + 3] / std::sqrt(ss / 16 + 1e-6), 1e-5);
  }
}

}  // namespace
}  // namespace tilegrid
