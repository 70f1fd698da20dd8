// The weight gradient's step lists (sparse_conv_sm90_steps.h): a flag a (tap, step of 64 rows),
// an exclusive scan of the flags (the step's place in the list), then the listed steps' pairs.
#include "grid/conv/sm90/sparse_conv_sm90_steps.h"

#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "core/cuda_check.h"
#include "core/cuda_grid_stride.h"

namespace tilegrid::grid::sm90 {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Where the steps read the map: the map in row order if there is one, else the map through
// the order (one scattered read a pair), else the map.
struct MapRows {
  const int32_t* map;
  const int32_t* order;
  const int32_t* in_order;
};

// The (input, output) rows of row `i` of the order for tap t; (-1, -1) past the rows.
__device__ __forceinline__ int2 pair_of(const MapRows& m, int64_t t, int64_t rows,
                                        int64_t feature_rows, int64_t i) {
  if (i >= rows) return make_int2(-1, -1);
  int32_t o = m.order != nullptr ? m.order[i] : int32_t(i);
  if (o < 0 || o >= rows) return make_int2(-1, -1);
  int32_t n = m.in_order != nullptr ? m.in_order[t * rows + i] : m.map[t * rows + o];
  if (n >= feature_rows) n = -1;
  return make_int2(n, o);
}

// flags[t * steps + s] = whether step s of tap t has a pair; a warp a (tap, step).
__global__ void step_flags_kernel(MapRows map, int64_t volume, int64_t rows, int64_t feature_rows,
                                  int64_t steps, int32_t* __restrict__ flags) {
  const int lane = int(threadIdx.x % 32);
  for (int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; w < volume * steps;
       w += int64_t(gridDim.x) * blockDim.x / 32) {
    const int64_t t = w / steps, s = w % steps;
    bool any = false;
    for (int h = 0; h < kStepRows / 32; ++h)
      any |= pair_of(map, t, rows, feature_rows, s * kStepRows + lane + 32 * h).x >= 0;
    any = __any_sync(0xffffffffu, any);
    if (lane == 0) flags[w] = any;
  }
}

// The listed steps' pairs, at their scanned places.
__global__ void step_pairs_kernel(MapRows map, int64_t volume, int64_t rows, int64_t feature_rows,
                                  int64_t steps, const int32_t* __restrict__ flags,
                                  const int32_t* __restrict__ place, int2* __restrict__ pairs) {
  const int lane = int(threadIdx.x % 32);
  for (int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; w < volume * steps;
       w += int64_t(gridDim.x) * blockDim.x / 32) {
    if (!flags[w]) continue;
    const int64_t t = w / steps, s = w % steps;
    int2* out = pairs + int64_t(place[w]) * kStepRows;
    for (int h = 0; h < kStepRows / 32; ++h) {
      const int r = lane + 32 * h;
      int2 pr = pair_of(map, t, rows, feature_rows, s * kStepRows + r);
      if (pr.x < 0) pr = make_int2(-1, -1);
      out[r] = pr;
    }
  }
}

__global__ void tap_begin_kernel(const int32_t* __restrict__ place, int64_t volume, int64_t steps,
                                 int32_t* __restrict__ tap_begin) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t <= volume) tap_begin[t] = place[t * steps];
}

}  // namespace

WgradSteps wgrad_steps(const int32_t* map, const int32_t* order, const int32_t* map_in_row_order,
                       int64_t volume, int64_t rows, int64_t feature_rows, int device,
                       Stream stream) {
  const MapRows m{map, order, order != nullptr ? map_in_row_order : nullptr};
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  const Device where = Device::cuda(device);
  const int64_t steps = (rows + kStepRows - 1) / kStepRows, n = volume * steps;
  // flags and places have one more entry (0), so that place[volume * steps] is the total.
  Tensor flags = Tensor::empty({n + 1}, DType::Int32, where, stream);
  Tensor place = Tensor::empty({n + 1}, DType::Int32, where, stream);
  WgradSteps out;
  out.pairs = Tensor::empty({std::max<int64_t>(n, 1) * kStepRows * int64_t(sizeof(int2))},
                            DType::UInt8, where, stream);
  out.tap_begin = Tensor::empty({volume + 1}, DType::Int32, where, stream);
  auto* f = static_cast<int32_t*>(flags.data());
  auto* pl = static_cast<int32_t*>(place.data());
  TG_CUDA_CHECK(cudaMemsetAsync(f + n, 0, sizeof(int32_t), s));
  if (n > 0) {
    step_flags_kernel<<<grid_stride_blocks(n, kWarps), kThreads, 0, s>>>(m, volume, rows,
                                                                         feature_rows, steps, f);
    TG_CUDA_CHECK_LAUNCH();
  }
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, f, pl, n + 1, s));
  Tensor temp = Tensor::empty({int64_t(std::max<size_t>(bytes, 1))}, DType::UInt8, where, stream);
  TG_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data(), bytes, f, pl, n + 1, s));
  if (n > 0) {
    step_pairs_kernel<<<grid_stride_blocks(n, kWarps), kThreads, 0, s>>>(
        m, volume, rows, feature_rows, steps, f, pl, static_cast<int2*>(out.pairs.data()));
    TG_CUDA_CHECK_LAUNCH();
  }
  tap_begin_kernel<<<unsigned((volume + 1 + 255) / 256), 256, 0, s>>>(
      pl, volume, steps, static_cast<int32_t*>(out.tap_begin.data()));
  TG_CUDA_CHECK_LAUNCH();
  return out;
}

}  // namespace tilegrid::grid::sm90
