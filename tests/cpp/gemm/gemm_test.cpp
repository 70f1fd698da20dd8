#include "tilegrid/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace tilegrid {
namespace {

using testing::random_tensor;
using testing::to_doubles;

// The three products of a linear layer, as matmul operand layouts (see gemm.h).
enum class Form { Fprop, Dgrad, Wgrad };

const char* form_name(Form f) {
  return f == Form::Fprop ? "fprop" : f == Form::Dgrad ? "dgrad" : "wgrad";
}

// A row-major [rows, cols] tensor viewed as its [cols, rows] transpose.
TensorView transposed(const Tensor& t) {
  return TensorView(t.data(), t.dtype(), t.device(), {t.shape()[1], t.shape()[0]},
                    {1, t.shape()[1]});
}

// Operands of out[M, N] = a[M, K] * b[K, N] in the storage a linear layer has: `a_store` and
// `b_store` are contiguous tensors, `a` and `b` the views matmul takes.
struct Operands {
  Tensor a_store, b_store;
  TensorView a, b;
};

Operands make_operands(Form form, int64_t m, int64_t n, int64_t k, DType dtype, Device device) {
  Operands o;
  const Shape a_shape = form == Form::Wgrad ? Shape{k, m} : Shape{m, k};
  const Shape b_shape = form == Form::Fprop ? Shape{n, k} : Shape{k, n};
  o.a_store = testing::to_device(random_tensor(a_shape, dtype), device);
  o.b_store = testing::to_device(random_tensor(b_shape, dtype), device);
  o.a = form == Form::Wgrad ? transposed(o.a_store) : o.a_store.view();
  o.b = form == Form::Fprop ? transposed(o.b_store) : o.b_store.view();
  return o;
}

// Float64 product of the (already rounded) inputs, and sum_k |a(i,k)| |b(k,j)|, which bounds
// the float32 accumulation error.
struct Reference {
  std::vector<double> out, magnitude;
};

Reference reference(const Operands& o, int64_t m, int64_t n, int64_t k) {
  const std::vector<double> a = to_doubles(o.a_store), b = to_doubles(o.b_store);
  const int64_t sam = o.a.strides[0], sak = o.a.strides[1];
  const int64_t sbk = o.b.strides[0], sbn = o.b.strides[1];
  Reference r;
  r.out.assign(m * n, 0.0);
  r.magnitude.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = a[i * sam + kk * sak] * b[kk * sbk + j * sbn];
        sum += p;
        mag += std::fabs(p);
      }
      r.out[i * n + j] = sum;
      r.magnitude[i * n + j] = mag;
    }
  return r;
}

// |got - want| <= u * |want| + 2^-14 * sum |a||b| + s: u is the unit roundoff of the output's
// storage type (2^-8 for bfloat16's 8-bit significand, 2^-11 for float16, 0 for float32), the
// second term bounds the float32 accumulation (K <= 1040 here, and K * 2^-24 < 2^-14), and s is
// half the spacing of the storage type's subnormals (float16: 2^-25), where rounding is absolute,
// not relative (a K = 1 product of about 2e-5 rounds to float16 with an error of 1.4e-8). NaN (a
// poisoned, unwritten element) fails.
void expect_matches(const Tensor& out, const Reference& ref, const std::string& what) {
  const std::vector<double> got = to_doubles(out);
  ASSERT_EQ(got.size(), ref.out.size()) << what;
  const double rtol = out.dtype() == DType::BFloat16  ? std::ldexp(1.0, -8)
                      : out.dtype() == DType::Float16 ? std::ldexp(1.0, -11)
                                                      : 0.0;
  const double subnormal = out.dtype() == DType::Float16 ? std::ldexp(1.0, -25) : 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = rtol * std::fabs(ref.out[i]) + std::ldexp(ref.magnitude[i], -14) + subnormal;
    ASSERT_TRUE(std::fabs(got[i] - ref.out[i]) <= bound)
        << what << " [" << i << "]: got " << got[i] << ", want " << ref.out[i];
  }
}

#ifdef TILEGRID_WITH_CUDA
int compute_capability() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor;
}
#endif

// Why `kernel` cannot run here (empty when it can): every CUDA case needs a GPU, the sm90
// kernels a compute capability 9.0 one.
std::string cannot_run(bool on_cuda, MatmulKernel kernel) {
  if (!on_cuda) return "";
  if (!testing::cuda_available()) return "no CUDA GPU on this machine";
#ifdef TILEGRID_WITH_CUDA
  if ((kernel == MatmulKernel::Sm90Cooperative || kernel == MatmulKernel::Sm90Pingpong) &&
      compute_capability() != 90)
    return "the sm90 kernels need a compute capability 9.0 GPU";
#endif
  return "";
}

const char* kernel_name(MatmulKernel k) {
  switch (k) {
    case MatmulKernel::Auto:
      return "auto";
    case MatmulKernel::Sm90Cooperative:
      return "sm90cooperative";
    case MatmulKernel::Sm90Pingpong:
      return "sm90pingpong";
    case MatmulKernel::Portable:
      return "portable";
  }
  return "?";
}

using Case = std::tuple<DType, bool /*float32 out*/, Form, bool /*cuda*/, MatmulKernel>;

class MatmulMatchesFloat64Reference : public ::testing::TestWithParam<Case> {};

// Shapes with tails in every dimension for the GPU tiles (128x256 and 128x128 outputs, K in
// steps of 64): M = 1 and odd M; N and K multiples of 8 but not of the tiles. In the weight
// gradient the token count is the product's K and may be anything (37, 130).
TEST_P(MatmulMatchesFloat64Reference, OnShapesWithTails) {
  const auto [dtype, f32_out, form, on_cuda, kernel] = GetParam();
  if (const std::string why = cannot_run(on_cuda, kernel); !why.empty()) GTEST_SKIP() << why;
  const Device device = on_cuda ? Device::cuda(0) : Device::cpu();
  const DType out_dtype = f32_out ? DType::Float32 : dtype;
  struct Mnk {
    int64_t m, n, k;
  };
  const std::vector<Mnk> shapes =
      form == Form::Wgrad
          ? std::vector<Mnk>{{8, 8, 1}, {24, 40, 37}, {136, 264, 130}, {264, 136, 1040}}
          : std::vector<Mnk>{{1, 8, 8}, {37, 24, 40}, {130, 264, 72}, {257, 136, 1040}};
  for (const Mnk& s : shapes) {
    const std::string what = std::string(form_name(form)) + " M=" + std::to_string(s.m) +
                             " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k);
    Operands o = make_operands(form, s.m, s.n, s.k, dtype, device);
    Tensor out = Tensor::empty({s.m, s.n}, out_dtype, device);
    testing::poison(out);
    matmul(o.a, o.b, out, {}, kernel);
    expect_matches(out, reference(o, s.m, s.n, s.k), what);
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [dtype, f32_out, form, on_cuda, kernel] = info.param;
  return std::string(name(dtype)) + (f32_out ? "_f32out_" : "_") + form_name(form) +
         (on_cuda ? std::string("_cuda_") + kernel_name(kernel) : std::string("_cpu"));
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, MatmulMatchesFloat64Reference,
    ::testing::Combine(::testing::Values(DType::BFloat16, DType::Float16),
                       ::testing::Values(false, true),
                       ::testing::Values(Form::Fprop, Form::Dgrad, Form::Wgrad),
                       ::testing::Values(false), ::testing::Values(MatmulKernel::Auto)),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Cuda, MatmulMatchesFloat64Reference,
    ::testing::Combine(::testing::Values(DType::BFloat16, DType::Float16),
                       ::testing::Values(false, true),
                       ::testing::Values(Form::Fprop, Form::Dgrad, Form::Wgrad),
                       ::testing::Values(true),
                       ::testing::Values(MatmulKernel::Auto, MatmulKernel::Sm90Cooperative,
                                         MatmulKernel::Sm90Pingpong, MatmulKernel::Portable)),
    case_name);

// The linear-layer wrappers compute the same products as matmul on the equivalent views.
void check_linear_wrappers(Device device) {
  const int64_t tokens = 45, in = 40, out_f = 24;
  Tensor x = testing::to_device(random_tensor({tokens, in}, DType::BFloat16), device);
  Tensor w = testing::to_device(random_tensor({out_f, in}, DType::BFloat16), device);
  Tensor dy = testing::to_device(random_tensor({tokens, out_f}, DType::BFloat16), device);
  Tensor y = Tensor::empty({tokens, out_f}, DType::Float32, device);
  Tensor dx = Tensor::empty({tokens, in}, DType::Float32, device);
  Tensor dw = Tensor::empty({out_f, in}, DType::Float32, device);
  Tensor want = Tensor::empty({out_f, in}, DType::Float32, device);
  for (const Tensor* t : {&y, &dx, &dw, &want}) testing::poison(*t);

  linear_forward(x, w, y);
  linear_backward_input(dy, w, dx);
  linear_backward_weight(dy, x, dw);
  const Operands fprop{x, w, x.view(), transposed(w)};
  expect_matches(y, reference(fprop, tokens, out_f, in), "linear_forward");
  const Operands dgrad{dy, w, dy.view(), w.view()};
  expect_matches(dx, reference(dgrad, tokens, in, out_f), "linear_backward_input");
  const Operands wgrad{dy, x, transposed(dy), x.view()};
  expect_matches(dw, reference(wgrad, out_f, in, tokens), "linear_backward_weight");
}

TEST(Matmul, LinearWrappersMatchReferenceCpu) {
  check_linear_wrappers(Device::cpu());
}

TEST(Matmul, LinearWrappersMatchReferenceCuda) {
  TG_SKIP_WITHOUT_GPU();
  check_linear_wrappers(Device::cuda(0));
}

// Leading strides larger than the rows (a column slice of a wider matrix) are read in place,
// and the output's row stride is honoured: columns past N stay untouched.
void check_strided(Device device) {
  const int64_t m = 19, n = 16, k = 24;
  Tensor a_wide = testing::to_device(random_tensor({m, 40}, DType::Float16), device);
  Tensor b = testing::to_device(random_tensor({k, n}, DType::Float16), device);
  Tensor out_wide = Tensor::empty({m, 32}, DType::Float32, device);
  testing::poison(out_wide);
  const TensorView a(a_wide.data(), DType::Float16, device, {m, k}, {40, 1});
  const TensorView out(out_wide.data(), DType::Float32, device, {m, n}, {32, 1});
  matmul(a, b, out);

  const std::vector<double> av = to_doubles(a_wide), bv = to_doubles(b), ov = to_doubles(out_wide);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        want += av[i * 40 + kk] * bv[kk * n + j];
        mag += std::fabs(av[i * 40 + kk] * bv[kk * n + j]);
      }
      ASSERT_NEAR(ov[i * 32 + j], want, std::ldexp(mag, -14) + 1e-30) << i << "," << j;
    }
    for (int64_t j = n; j < 32; ++j) ASSERT_TRUE(std::isnan(ov[i * 32 + j])) << "wrote past N";
  }
}

TEST(Matmul, StridedOperandsCpu) {
  check_strided(Device::cpu());
}

TEST(Matmul, StridedOperandsCuda) {
  TG_SKIP_WITHOUT_GPU();
  check_strided(Device::cuda(0));
}

// K = 0 is an empty sum: zeros. M = 0 writes nothing.
void check_empty(Device device) {
  Tensor a = Tensor::empty({5, 0}, DType::BFloat16, device);
  Tensor b = Tensor::empty({0, 8}, DType::BFloat16, device);
  Tensor out = Tensor::empty({5, 8}, DType::BFloat16, device);
  testing::poison(out);
  matmul(a, b, out);
  for (double v : to_doubles(out)) ASSERT_EQ(v, 0.0);
  Tensor a0 = Tensor::empty({0, 8}, DType::BFloat16, device);
  Tensor b8 = testing::to_device(random_tensor({8, 8}, DType::BFloat16), device);
  Tensor out0 = Tensor::empty({0, 8}, DType::BFloat16, device);
  matmul(a0, b8, out0);
}

TEST(Matmul, EmptyProductsCpu) {
  check_empty(Device::cpu());
}

TEST(Matmul, EmptyProductsCuda) {
  TG_SKIP_WITHOUT_GPU();
  check_empty(Device::cuda(0));
}

TEST(Matmul, BadInputsGetClearErrors) {
  const Device cpu = Device::cpu();
  Tensor a = random_tensor({4, 16}, DType::BFloat16);
  Tensor b = random_tensor({16, 8}, DType::BFloat16);
  Tensor out = Tensor::empty({4, 8}, DType::BFloat16, cpu);

  Tensor a_f32 = Tensor::empty({4, 16}, DType::Float32, cpu);
  EXPECT_EQ(testing::error_message([&] { matmul(a_f32, b, out); }),
            "matmul: a must be bfloat16 or float16, got float32");
  Tensor b_f16 = random_tensor({16, 8}, DType::Float16);
  EXPECT_EQ(testing::error_message([&] { matmul(a, b_f16, out); }), "matmul: b must be bfloat16, got float16");
  Tensor out_f16 = Tensor::empty({4, 8}, DType::Float16, cpu);
  EXPECT_EQ(testing::error_message([&] { matmul(a, b, out_f16); }),
            "matmul: out must be bfloat16 or float32, got float16");
  Tensor b_bad = random_tensor({12, 8}, DType::BFloat16);
  EXPECT_EQ(testing::error_message([&] { matmul(a, b_bad, out); }),
            "matmul: b must have 16 rows to match a of shape [4, 16] ([M, K]), got shape [12, 8]");
  Tensor out_bad = Tensor::empty({4, 16}, DType::BFloat16, cpu);
  EXPECT_EQ(testing::error_message([&] { matmul(a, b, out_bad); }),
            "matmul: out must have shape [4, 8], got [4, 16]");

  // K not a multiple of 8.
  Tensor a12 = random_tensor({4, 12}, DType::BFloat16);
  Tensor b12 = random_tensor({12, 8}, DType::BFloat16);
  EXPECT_EQ(testing::error_message([&] { matmul(a12, b12, out); }),
            "matmul: a is contiguous along K, which must be a multiple of 8 (16-byte rows), got 12 "
            "(shape [4, 12])");
  // N not a multiple of 8.
  Tensor b20 = random_tensor({16, 20}, DType::BFloat16);
  Tensor out20 = Tensor::empty({4, 20}, DType::BFloat16, cpu);
  EXPECT_EQ(testing::error_message([&] { matmul(a, b20, out20); }),
            "matmul: b is contiguous along N, which must be a multiple of 8 (16-byte rows), got 20 "
            "(shape [16, 20])");
  // Both operands transposed views.
  Tensor at = random_tensor({16, 8}, DType::BFloat16);
  Tensor bt = random_tensor({8, 16}, DType::BFloat16);
  Tensor out8 = Tensor::empty({8, 8}, DType::BFloat16, cpu);
  EXPECT_NE(testing::error_message([&] {
              matmul(transposed(at), transposed(bt), out8);
            }).find("a and b are both transposed views"),
            std::string::npos);
  // Neither dimension contiguous.
  Tensor big = random_tensor({8, 64}, DType::BFloat16);
  const TensorView every_other(big.data(), DType::BFloat16, cpu, {4, 16}, {128, 2});
  EXPECT_NE(testing::error_message([&] {
              matmul(every_other, b, out);
            }).find("a must be contiguous along one of its dimensions"),
            std::string::npos);
  // A leading stride that breaks 16-byte alignment.
  const TensorView odd_rows(big.data(), DType::BFloat16, cpu, {4, 16}, {20, 1});
  EXPECT_EQ(testing::error_message([&] { matmul(odd_rows, b, out); }),
            "matmul: the leading stride of a must be a multiple of 8 elements (16 bytes), got 20 "
            "(shape [4, 16], strides [20, 1])");
  // A misaligned data pointer.
  const TensorView shifted(static_cast<uint16_t*>(big.data()) + 1, DType::BFloat16, cpu, {4, 16},
                           {64, 1});
  EXPECT_NE(testing::error_message([&] {
              matmul(shifted, b, out);
            }).find("a's data pointer must be 16-byte aligned, got an address 2 bytes past"),
            std::string::npos);
  // A column-major output.
  const TensorView out_t(out.data(), DType::BFloat16, cpu, {4, 8}, {1, 4});
  EXPECT_NE(testing::error_message([&] {
              matmul(a, b, out_t);
            }).find("out must be row-major with a contiguous last dimension"),
            std::string::npos);
  // Devices and kernels.
  const TensorView b_gpu(b.data(), DType::BFloat16, Device::cuda(0), {16, 8});
  EXPECT_EQ(testing::error_message([&] { matmul(a, b_gpu, out); }),
            "matmul: b is on cuda:0 but a is on cpu; all tensors must be on one device");
  EXPECT_EQ(testing::error_message([&] { matmul(a, b, out, {}, MatmulKernel::Sm90Cooperative); }),
            "matmul: only kernel=Auto runs on the CPU; the others need tensors on a CUDA device");
  EXPECT_THROW(matmul(a, b, out_bad), ValueError);
  EXPECT_THROW(matmul(a_f32, b, out), TypeError);

  // The linear wrappers name their own arguments.
  Tensor w = random_tensor({8, 12}, DType::BFloat16);
  EXPECT_EQ(testing::error_message([&] { linear_forward(a, w, out); }),
            "linear_forward: x and weight must agree on in_features (their last dimension), got "
            "shapes [4, 16] and [8, 12]");
}

TEST(Matmul, DescribeNamesTheKernel) {
  Tensor a = random_tensor({4, 16}, DType::BFloat16);
  Tensor b = random_tensor({16, 8}, DType::BFloat16);
  Tensor out = Tensor::empty({4, 8}, DType::Float32, Device::cpu());
  EXPECT_EQ(describe_matmul(a, b, out), "cpu reference (blocked, float32 accumulation)");
}

// On a Hopper GPU Auto takes the sm90 kernels: cooperative for problems of at least one
// 128x256 tile per SM, ping-pong below.
TEST(Matmul, AutoPicksSm90OnHopper) {
  TG_SKIP_WITHOUT_GPU();
#ifdef TILEGRID_WITH_CUDA
  if (compute_capability() != 90) GTEST_SKIP() << "not a compute capability 9.0 GPU";
  const Device gpu = Device::cuda(0);
  Tensor big_a = Tensor::empty({8192, 64}, DType::BFloat16, gpu);
  Tensor big_b = Tensor::empty({64, 4096}, DType::BFloat16, gpu);
  Tensor big_out = Tensor::empty({8192, 4096}, DType::BFloat16, gpu);
  EXPECT_EQ(describe_matmul(big_a, big_b, big_out), "sm90 cooperative 128x256x64 cluster 2x1");
  Tensor small_a = Tensor::empty({256, 64}, DType::BFloat16, gpu);
  Tensor small_b = Tensor::empty({64, 512}, DType::BFloat16, gpu);
  Tensor small_out = Tensor::empty({256, 512}, DType::BFloat16, gpu);
  EXPECT_EQ(describe_matmul(small_a, small_b, small_out), "sm90 ping-pong 128x128x64 cluster 2x1");
#endif
}

}  // namespace
}  // namespace tilegrid
