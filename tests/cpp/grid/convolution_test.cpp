// The sparse convolution's C++ API: output grids and kernel maps against coordinate arithmetic
// done here independently, the GEMMs against a naive loop, argument errors, and (on a GPU) the
// CUDA maps and GEMMs against the CPU.
#include "tilegrid/grid/convolution.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util.h"

namespace tilegrid::grid {
namespace {

using Ijk = std::tuple<int32_t, int32_t, int32_t>;

GridBatch random_grid(int n, int32_t range) {
  std::uniform_int_distribution<int32_t> coord(-range, range);
  Tensor data = Tensor::empty({n, 3}, DType::Int32, Device::cpu());
  int32_t* xyz = static_cast<int32_t*>(data.data());
  for (int e = 0; e < 3 * n; ++e) xyz[e] = coord(testing::rng());
  Tensor offsets = Tensor::empty({2}, DType::Int64, Device::cpu());
  static_cast<int64_t*>(offsets.data())[0] = 0;
  static_cast<int64_t*>(offsets.data())[1] = n;
  return GridBatch::from_ijk(JaggedTensor(data, offsets));
}

std::vector<Ijk> coords(const GridBatch& g) {
  JaggedTensor ijk = g.ijk();
  const int32_t* xyz = static_cast<const int32_t*>(ijk.jdata().data());
  std::vector<Ijk> out;
  for (int64_t r = 0; r < g.total_voxels(); ++r) out.emplace_back(xyz[3 * r], xyz[3 * r + 1], xyz[3 * r + 2]);
  return out;
}

Tensor random_tensor(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::Float64, Device::cpu());
  std::normal_distribution<double> normal;
  for (int64_t e = 0; e < t.numel(); ++e) static_cast<double*>(t.data())[e] = normal(testing::rng());
  return t;
}

TEST(Convolution, StrideTwoGridAndMapFollowTheDocumentedGeometry) {
  const GridBatch source = random_grid(300, 9);
  const ConvGeometry g{{3, 3, 3}, {2, 2, 2}, false};
  const GridBatch target = conv_grid(source, g.kernel_size, g.stride);
  const std::vector<Ijk> in = coords(source), out = coords(target);
  std::map<Ijk, int32_t> row_of;
  for (size_t r = 0; r < in.size(); ++r) row_of[in[r]] = int32_t(r);
  // Expected outputs: o with o * 2 + t - 1 active for some t in [0, 3)^3.
  std::set<Ijk> expected;
  for (const auto& [i, j, k] : in)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        for (int c = 0; c < 3; ++c) {
          const int32_t x = i + 1 - a, y = j + 1 - b, z = k + 1 - c;
          if (x % 2 == 0 && y % 2 == 0 && z % 2 == 0) expected.emplace(x / 2, y / 2, z / 2);
        }
  EXPECT_EQ(std::set<Ijk>(out.begin(), out.end()), expected);
  EXPECT_EQ(target.voxel_sizes()[0][0], 2.0);

  const Tensor map = kernel_map(source, target, g);
  ASSERT_EQ(map.shape()[0], 27);
  const int32_t* m = static_cast<const int32_t*>(map.data());
  for (size_t o = 0; o < out.size(); ++o)
    for (int t = 0; t < 27; ++t) {
      const auto [i, j, k] = out[o];
      const Ijk want{i * 2 + t / 9 - 1, j * 2 + (t / 3) % 3 - 1, k * 2 + t % 3 - 1};
      const auto it = row_of.find(want);
      ASSERT_EQ(m[t * int64_t(out.size()) + int64_t(o)], it == row_of.end() ? -1 : it->second)
          << "output " << o << " tap " << t;
    }
}

TEST(Convolution, EvenKernelsPadAsFvdbConvolutionsAndPoolingWindowsStartAtTheOutput) {
  // fVDB 0.6: pad (K - 1) / 2 for every K; its pooling windows start at o * s (pad 0).
  const int32_t conv_pad[6] = {0, 0, 1, 1, 2, 2}, pool_pad[6] = {0, 0, 0, 0, 0, 0};
  for (int32_t k = 1; k <= 6; ++k) {
    EXPECT_EQ((ConvGeometry{{k, 1, 1}, {1, 1, 1}, false}.pad(0)), conv_pad[k - 1]) << "K " << k;
    EXPECT_EQ((ConvGeometry{{k, 1, 1}, {1, 1, 1}, false, TapStart::AtOutput}.pad(0)),
              pool_pad[k - 1])
        << "K " << k;
  }
  const GridBatch source = random_grid(200, 9);
  const std::vector<Ijk> in = coords(source);
  std::map<Ijk, int32_t> row_of;
  for (size_t r = 0; r < in.size(); ++r) row_of[in[r]] = int32_t(r);
  for (const TapStart start : {TapStart::Centred, TapStart::AtOutput}) {
    const ConvGeometry g{{4, 4, 4}, {2, 2, 2}, false, start};
    const int32_t pad = start == TapStart::AtOutput ? 0 : 1;
    const std::vector<Ijk> out = coords(conv_grid(source, g));
    const Tensor map = kernel_map(source, conv_grid(source, g), g);
    const int32_t* m = static_cast<const int32_t*>(map.data());
    std::vector<bool> reached(out.size(), false);
    for (size_t o = 0; o < out.size(); ++o)
      for (int t = 0; t < 64; ++t) {
        const auto [i, j, k] = out[o];
        const Ijk want{i * 2 + t / 16 - pad, j * 2 + (t / 4) % 4 - pad, k * 2 + t % 4 - pad};
        const auto it = row_of.find(want);
        ASSERT_EQ(m[t * int64_t(out.size()) + int64_t(o)], it == row_of.end() ? -1 : it->second)
            << "output " << o << " tap " << t << " pad " << pad;
        reached[o] = reached[o] || it != row_of.end();
      }
    for (size_t o = 0; o < out.size(); ++o) EXPECT_TRUE(reached[o]) << "output " << o;
  }
}

TEST(Convolution, ForwardAndWeightGradientMatchNaiveLoops) {
  const GridBatch grid = random_grid(200, 5);
  const Tensor map = kernel_map(grid, grid, {});
  const int64_t n = grid.total_voxels(), cin = 3, cout = 4;
  const Tensor x = random_tensor({n, cin}), w = random_tensor({27, cin, cout});
  const TensorView& wv = w.view();
  Tensor y = Tensor::empty({n, cout}, DType::Float64, Device::cpu());
  sparse_conv_forward(map.view(), x.view(), wv, y.view());
  const int32_t* m = static_cast<const int32_t*>(map.data());
  const double* xd = static_cast<const double*>(x.data());
  const double* wd = static_cast<const double*>(w.data());
  for (int64_t o = 0; o < n; ++o)
    for (int64_t co = 0; co < cout; ++co) {
      double want = 0;
      for (int t = 0; t < 27; ++t)
        if (m[t * n + o] >= 0)
          for (int64_t ci = 0; ci < cin; ++ci) want += xd[m[t * n + o] * cin + ci] * wd[(t * cin + ci) * cout + co];
      EXPECT_NEAR(static_cast<const double*>(y.data())[o * cout + co], want, 1e-12);
    }
  Tensor gw = Tensor::empty({27, cin, cout}, DType::Float64, Device::cpu());
  sparse_conv_backward_weight(map.view(), x.view(), y.view(), gw.view());
  const double* yd = static_cast<const double*>(y.data());
  for (int t = 0; t < 27; ++t)
    for (int64_t ci = 0; ci < cin; ++ci) {
      double want = 0;
      for (int64_t o = 0; o < n; ++o)
        if (m[t * n + o] >= 0) want += xd[m[t * n + o] * cin + ci] * yd[o * cout];
      EXPECT_NEAR(static_cast<const double*>(gw.data())[(t * cin + ci) * cout], want, 1e-9);
    }
}

// Zero channels on either side are valid shapes (an empty layer of a network): the forward
// writes zeros where there are no inputs and nothing where there are no outputs, the weight
// gradient is zero. The sanitizer build also checks that no empty buffer is indexed.
TEST(Convolution, ZeroChannelsOnEitherSideGiveZerosOrNothing) {
  const GridBatch grid = random_grid(50, 3);
  const Tensor map = kernel_map(grid, grid, {});
  const int64_t n = grid.total_voxels();
  for (const auto& [cin, cout] : {std::pair<int64_t, int64_t>{0, 4}, {3, 0}, {0, 0}}) {
    const Tensor x = random_tensor({n, cin}), w = random_tensor({27, cin, cout});
    Tensor y = random_tensor({n, cout});
    sparse_conv_forward(map.view(), x.view(), w.view(), y.view());
    for (int64_t e = 0; e < y.numel(); ++e) ASSERT_EQ(static_cast<const double*>(y.data())[e], 0.0);
    Tensor gw = random_tensor({27, cin, cout});
    sparse_conv_backward_weight(map.view(), x.view(), y.view(), gw.view());
    for (int64_t e = 0; e < gw.numel(); ++e)
      ASSERT_EQ(static_cast<const double*>(gw.data())[e], 0.0);
  }
}

// The row order is a permutation that sorts the rows by their tap masks, equal keys in row
// order; the forward with it gives the same bits as without (the CPU checks it and ignores it).
TEST(Convolution, RowOrderSortsRowsByTheirTapsAndLeavesResultsAlone) {
  const GridBatch grid = random_grid(400, 6);
  const Tensor map = kernel_map(grid, grid, {});
  const int64_t n = grid.total_voxels();
  const Tensor order = kernel_map_row_order(map.view());
  ASSERT_EQ(order.numel(), n);
  const int32_t* m = static_cast<const int32_t*>(map.data());
  const int32_t* ord = static_cast<const int32_t*>(order.data());
  auto key = [&](int32_t o) {
    uint64_t k = 0;
    for (int t = 0; t < 27; ++t) k |= uint64_t(m[t * n + o] >= 0) << t;
    return k;
  };
  std::vector<bool> seen(size_t(n), false);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(ord[i] >= 0 && ord[i] < n && !seen[size_t(ord[i])]) << "at " << i;
    seen[size_t(ord[i])] = true;
    if (i > 0) {
      ASSERT_LE(key(ord[i - 1]), key(ord[i])) << "at " << i;
      if (key(ord[i - 1]) == key(ord[i])) {
        ASSERT_LT(ord[i - 1], ord[i]) << "at " << i;
      }
    }
  }
  const Tensor x = random_tensor({n, 3}), w = random_tensor({27, 3, 2});
  const TensorView& wv = w.view();
  Tensor plain = Tensor::empty({n, 2}, DType::Float64, Device::cpu());
  Tensor ordered = Tensor::empty({n, 2}, DType::Float64, Device::cpu());
  sparse_conv_forward(map.view(), x.view(), wv, plain.view());
  sparse_conv_forward(map.view(), x.view(), wv, ordered.view(), false, {}, order.view());
  EXPECT_EQ(std::memcmp(plain.data(), ordered.data(), size_t(plain.numel()) * sizeof(double)), 0);
}

TEST(Convolution, BadArgumentsSayWhatWasExpected) {
  const GridBatch grid = random_grid(50, 4);
  const Tensor map = kernel_map(grid, grid, {});
  const Tensor x = random_tensor({grid.total_voxels(), 3});
  const Tensor w = random_tensor({27, 2, 4});  // C_in 2, but the features have 3
  const TensorView& wv = w.view();
  Tensor y = Tensor::empty({grid.total_voxels(), 4}, DType::Float64, Device::cpu());
  EXPECT_NE(testing::error_message([&] { sparse_conv_forward(map.view(), x.view(), wv, y.view()); })
                .find("weight must have shape [27, 3, 4]"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] { conv_grid(grid, {0, 3, 3}, {1, 1, 1}); })
                .find("kernel_size must be in [1, 31]"),
            std::string::npos);
}

// out = relu(conv * scale + shift + residual) against the plain forward with the formula
// applied here; on a GPU the CUDA kernels (Hopper's in-kernel where it takes the shapes, a
// pass after the others) against the CPU. A scale of the wrong length is refused.
TEST(Convolution, ForwardEpilogueIsTheFormulaAfterTheSums) {
  const GridBatch grid = random_grid(300, 6);
  const Tensor map = kernel_map(grid, grid, {});
  const int64_t n = grid.total_voxels(), cin = 8, cout = 16;
  const Tensor x = random_tensor({n, cin}), w = random_tensor({27, cin, cout});
  const Tensor residual = random_tensor({n, cout});
  Tensor scale = Tensor::empty({cout}, DType::Float32, Device::cpu());
  Tensor shift = Tensor::empty({cout}, DType::Float32, Device::cpu());
  for (int64_t c = 0; c < cout; ++c) {
    static_cast<float*>(scale.data())[c] = 0.5f + 0.125f * float(c);
    static_cast<float*>(shift.data())[c] = float(c % 5) - 2.0f;
  }
  Tensor plain = Tensor::empty({n, cout}, DType::Float64, Device::cpu());
  Tensor fused = Tensor::empty({n, cout}, DType::Float64, Device::cpu());
  sparse_conv_forward(map.view(), x.view(), w.view(), plain.view());
  const ConvEpilogue epilogue{scale.view(), shift.view(), residual.view(), true};
  sparse_conv_forward(map.view(), x.view(), w.view(), fused.view(), false, {}, {}, {}, false,
                      &epilogue);
  const double* p = static_cast<const double*>(plain.data());
  const double* r = static_cast<const double*>(residual.data());
  const double* f = static_cast<const double*>(fused.data());
  int64_t clipped = 0;
  for (int64_t e = 0; e < n * cout; ++e) {
    const int64_t c = e % cout;
    const double v = p[e] * static_cast<const float*>(scale.data())[c] +
                     static_cast<const float*>(shift.data())[c] + r[e];
    clipped += v < 0;
    EXPECT_NEAR(f[e], v > 0 ? v : 0.0, 1e-12) << "element " << e;
  }
  EXPECT_GT(clipped, 0);  // the ReLU was exercised
  Tensor short_scale = Tensor::empty({cout - 1}, DType::Float32, Device::cpu());
  const ConvEpilogue bad{short_scale.view(), {}, {}, false};
  EXPECT_NE(testing::error_message([&] {
              sparse_conv_forward(map.view(), x.view(), w.view(), fused.view(), false, {}, {}, {},
                                  false, &bad);
            }).find("epilogue scale"),
            std::string::npos);
  if (!testing::cuda_available()) return;
  const Device gpu = Device::cuda(0);
  const GridBatch grid_gpu = grid.to(gpu);
  const Tensor map_gpu = kernel_map(grid_gpu, grid_gpu, {});
  const Tensor xg = x.to(gpu), wg = w.to(gpu), rg = residual.to(gpu);
  const Tensor sg = scale.to(gpu), hg = shift.to(gpu);
  Tensor yg = Tensor::empty({n, cout}, DType::Float64, gpu);
  const ConvEpilogue on_gpu{sg.view(), hg.view(), rg.view(), true};
  sparse_conv_forward(map_gpu.view(), xg.view(), wg.view(), yg.view(), false, {}, {}, {}, false,
                      &on_gpu);
  const Tensor back = yg.to(Device::cpu());
  for (int64_t e = 0; e < n * cout; ++e)
    EXPECT_NEAR(static_cast<const double*>(back.data())[e], f[e], 1e-12) << "element " << e;
}

TEST(Convolution, CudaMapsAndForwardEqualTheCpu) {
  TG_SKIP_WITHOUT_GPU();
  const GridBatch cpu = random_grid(2000, 20);
  const GridBatch gpu = cpu.to(Device::cuda(0));
  const ConvGeometry g{{3, 3, 3}, {2, 2, 2}, true};
  const GridBatch target_cpu = conv_transpose_grid(cpu, g.kernel_size, g.stride);
  const GridBatch target_gpu = conv_transpose_grid(gpu, g.kernel_size, g.stride);
  ASSERT_EQ(target_cpu.total_voxels(), target_gpu.total_voxels());
  const Tensor map_cpu = kernel_map(cpu, target_cpu, g);
  const Tensor map_gpu = kernel_map(gpu, target_gpu, g).to(Device::cpu());
  ASSERT_EQ(std::memcmp(map_cpu.data(), map_gpu.data(), size_t(map_cpu.numel()) * 4), 0);
  const Tensor x = random_tensor({cpu.total_voxels(), 5}), w = random_tensor({27, 5, 6});
  const TensorView& wv = w.view();
  const Tensor wg = w.to(Device::cuda(0));
  const TensorView& wgv = wg.view();
  Tensor y = Tensor::empty({target_cpu.total_voxels(), 6}, DType::Float64, Device::cpu());
  Tensor yg = Tensor::empty({target_cpu.total_voxels(), 6}, DType::Float64, Device::cuda(0));
  const Tensor map_dev = kernel_map(gpu, target_gpu, g);
  const Tensor xg = x.to(Device::cuda(0));
  sparse_conv_forward(map_cpu.view(), x.view(), wv, y.view());
  sparse_conv_forward(map_dev.view(), xg.view(), wgv, yg.view());
  const Tensor back = yg.to(Device::cpu());
  for (int64_t e = 0; e < y.numel(); ++e)
    EXPECT_NEAR(static_cast<const double*>(back.data())[e], static_cast<const double*>(y.data())[e], 1e-12);
}

// kernel_map_with_row_order is the three ops in one: the CPU's map, order and map in that order,
// byte for byte; on the GPU where the leaf kernel builds the sort keys with the map (3x3x3:
// 32-bit keys, the taps unrolled; 5x5x5: 64-bit keys, taps past the 64th read from the map),
// and where it does not (stride 2: the keys from the map, as kernel_map_row_order makes them).
TEST(Convolution, MapWithRowOrderIsTheThreeOps) {
  const GridBatch cpu = random_grid(2000, 20);
  auto equal = [](const Tensor& want, const Tensor& got) {
    const Tensor host = got.to(Device::cpu());
    return want.shape() == host.shape() &&
           std::memcmp(want.data(), host.data(), size_t(want.numel()) * 4) == 0;
  };
  for (const ConvGeometry& g :
       {ConvGeometry{{3, 3, 3}, {1, 1, 1}, false}, ConvGeometry{{5, 5, 5}, {1, 1, 1}, false},
        ConvGeometry{{3, 3, 3}, {2, 2, 2}, false}}) {
    const GridBatch target = g.stride[0] == 1 ? cpu : conv_grid(cpu, g.kernel_size, g.stride);
    const Tensor map = kernel_map(cpu, target, g);
    const Tensor order = kernel_map_row_order(map.view());
    const Tensor in_order = kernel_map_in_row_order(map.view(), order.view());
    const OrderedKernelMap both = kernel_map_with_row_order(cpu, target, g);
    EXPECT_TRUE(equal(map, both.map) && equal(order, both.row_order) &&
                equal(in_order, both.map_in_row_order))
        << "kernel size " << g.kernel_size[0] << ", stride " << g.stride[0];
    if (!testing::cuda_available()) continue;
    const GridBatch gpu = cpu.to(Device::cuda(0));
    const OrderedKernelMap dev =
        kernel_map_with_row_order(gpu, g.stride[0] == 1 ? gpu : target.to(Device::cuda(0)), g);
    EXPECT_TRUE(equal(map, dev.map) && equal(order, dev.row_order) &&
                equal(in_order, dev.map_in_row_order))
        << "on the GPU: kernel size " << g.kernel_size[0] << ", stride " << g.stride[0];
  }
}

}  // namespace
}  // namespace tilegrid::grid
