// The sparse convolution's CPU reference: the grid, the maps and the GEMMs over the maps as
// plain loops, every sum in float64 (features and weights widened once, results rounded once).
// The GEMMs and the kernel map run on every core (parallel_for): the forward and the map over
// blocks of output rows, the weight gradient over taps, each writing its own outputs, so the
// results do not depend on the cores.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/parallel_for.h"
#include "grid/conv/conv_cpu.h"
#include "tilegrid/core/element_access.h"
#include "tilegrid/core/jagged_index.h"

namespace tilegrid::grid::cpu {
namespace {

std::vector<double> widen(DType dtype, const void* data, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_element(dtype, data, i);
  return out;
}

}  // namespace

bool conv_candidates(const int32_t* xyz, const int64_t* voxel_offsets, int64_t num_grids,
                     const Taps& taps, std::vector<int32_t>& out_xyz,
                     std::vector<int64_t>& out_offsets) {
  out_xyz.clear();
  out_offsets.assign(1, 0);
  if (taps.tiles_its_stride()) {  // one candidate an input, its parent (as on the GPU)
    const int64_t n = voxel_offsets[num_grids];
    out_xyz.resize(size_t(3 * n));
    for (int64_t p = 0; p < 3 * n; ++p) out_xyz[size_t(p)] = taps.parent_of(xyz[p], int(p % 3));
    out_offsets.assign(voxel_offsets, voxel_offsets + num_grids + 1);
    return true;
  }
  for (int64_t b = 0; b < num_grids; ++b) {
    for (int64_t row = voxel_offsets[b]; row < voxel_offsets[b + 1]; ++row) {
      const Coord in{xyz[3 * row], xyz[3 * row + 1], xyz[3 * row + 2]};
      for (int64_t t = 0; t < taps.volume; ++t) {
        int64_t o[3];
        if (!taps.output_of(in, t, o)) continue;
        for (int a = 0; a < 3; ++a) {
          if (o[a] < INT32_MIN || o[a] > INT32_MAX) return false;
          out_xyz.push_back(int32_t(o[a]));
        }
      }
    }
    out_offsets.push_back(int64_t(out_xyz.size() / 3));
  }
  return true;
}

// Every core takes blocks of a grid's outputs; an output writes only its own column of the map.
void kernel_map(const TreeView& source, const int32_t* target_xyz, const int64_t* target_offsets,
                int64_t num_grids, int64_t n_out, const Taps& taps, int32_t* map) {
  constexpr int64_t kBlock = 1024;  // outputs a task
  for (int64_t b = 0; b < num_grids; ++b) {
    const int64_t first = target_offsets[b], count = target_offsets[b + 1] - first;
    parallel_for((count + kBlock - 1) / kBlock, [&](int64_t block) {
      const int64_t end = std::min(first + (block + 1) * kBlock, first + count);
      // One cache a block: an output's taps, and outputs next in the grid's order, mostly
      // share leaves.
      CachedLookup lookup(source, b);
      for (int64_t o = first + block * kBlock; o < end; ++o) {
        const Coord out{target_xyz[3 * o], target_xyz[3 * o + 1], target_xyz[3 * o + 2]};
        for (int64_t t = 0; t < taps.volume; ++t) {
          Coord in;
          map[t * n_out + o] = taps.input_of(out, t, in) ? int32_t(lookup.index_of(in)) : -1;
        }
      }
    });
  }
}

void invert_kernel_map(const int32_t* map, int64_t volume, int64_t n_out, int64_t n_in,
                       int32_t* inverse) {
  std::fill(inverse, inverse + volume * n_in, -1);
  for (int64_t t = 0; t < volume; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      const int32_t i = map[t * n_out + o];
      if (i >= 0) inverse[t * n_in + i] = int32_t(o);
    }
}

void kernel_map_row_order(const int32_t* map, int64_t volume, int64_t n_out, int32_t* order) {
  std::vector<uint64_t> keys(size_t(n_out), 0);
  for (int64_t t = 0; t < std::min<int64_t>(volume, 64); ++t)
    for (int64_t o = 0; o < n_out; ++o)
      if (map[t * n_out + o] >= 0) keys[size_t(o)] |= uint64_t(1) << t;
  std::iota(order, order + n_out, 0);
  std::stable_sort(order, order + n_out,
                   [&](int32_t a, int32_t b) { return keys[size_t(a)] < keys[size_t(b)]; });
}

void kernel_map_in_row_order(const int32_t* map, const int32_t* order, int64_t volume,
                             int64_t n_out, int32_t* out) {
  for (int64_t t = 0; t < volume; ++t)
    for (int64_t i = 0; i < n_out; ++i) out[t * n_out + i] = map[t * n_out + order[i]];
}

void sparse_conv_forward(const int32_t* map, int64_t volume, int64_t rows, const void* features,
                         int64_t features_rows, const void* weight, int64_t in_channels,
                         int64_t out_channels, bool transpose_weight, void* out, DType dtype,
                         const ConvEpilogueArgs& epilogue) {
  const std::vector<double> x = widen(dtype, features, features_rows * in_channels);
  // w[t][ci][co], whichever way the weight is stored.
  std::vector<double> w(size_t(volume * in_channels * out_channels));
  for (int64_t t = 0; t < volume; ++t)
    for (int64_t ci = 0; ci < in_channels; ++ci)
      for (int64_t co = 0; co < out_channels; ++co) {
        const int64_t src = transpose_weight ? (t * out_channels + co) * in_channels + ci
                                             : (t * in_channels + ci) * out_channels + co;
        w[size_t((t * in_channels + ci) * out_channels + co)] = load_element(dtype, weight, src);
      }
  constexpr int64_t kBlock = 256;  // output rows a task
  // Rows are addressed through data(): with 0 output channels w is empty, and w[0] would bind
  // a reference to no element.
  parallel_for((rows + kBlock - 1) / kBlock, [&](int64_t block) {
    std::vector<double> acc(static_cast<size_t>(out_channels));
    for (int64_t o = block * kBlock; o < std::min(rows, (block + 1) * kBlock); ++o) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t t = 0; t < volume; ++t) {
        const int32_t n = map[t * rows + o];
        if (n < 0) continue;
        for (int64_t ci = 0; ci < in_channels; ++ci) {
          const double v = x[size_t(n * in_channels + ci)];
          const double* wrow = w.data() + (t * in_channels + ci) * out_channels;
          for (int64_t co = 0; co < out_channels; ++co) acc[size_t(co)] += v * wrow[co];
        }
      }
      for (int64_t co = 0; co < out_channels; ++co) {
        const int64_t e = o * out_channels + co;
        double v = acc[size_t(co)];
        if (epilogue.any()) {
          const double skip = epilogue.residual ? load_element(dtype, epilogue.residual, e) : 0.0;
          v = epilogue.apply(v, co, skip);
        }
        store_element(dtype, out, e, v);
      }
    }
  });
}

void sparse_conv_backward_weight(const int32_t* map, int64_t volume, int64_t rows,
                                 const void* features, int64_t features_rows, const void* grad_out,
                                 int64_t in_channels, int64_t out_channels, void* grad_weight,
                                 DType dtype) {
  const std::vector<double> x = widen(dtype, features, features_rows * in_channels);
  const std::vector<double> g = widen(dtype, grad_out, rows * out_channels);
  std::vector<double> gw(size_t(volume * in_channels * out_channels), 0.0);
  parallel_for(volume, [&](int64_t t) {
    for (int64_t o = 0; o < rows; ++o) {
      const int32_t n = map[t * rows + o];
      if (n < 0) continue;
      const double* grow = g.data() + o * out_channels;
      for (int64_t ci = 0; ci < in_channels; ++ci) {
        const double v = x[size_t(n * in_channels + ci)];
        double* wrow = gw.data() + (t * in_channels + ci) * out_channels;
        for (int64_t co = 0; co < out_channels; ++co) wrow[co] += v * grow[co];
      }
    }
  });
  for (size_t e = 0; e < gw.size(); ++e) store_element(dtype, grad_weight, int64_t(e), gw[e]);
}

}  // namespace tilegrid::grid::cpu
