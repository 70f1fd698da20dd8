#pragma once
// The coordinate arithmetic of a convolution's taps (internal), shared by the CPU loops and the
// CUDA kernels so both build the same grids and maps. Conventions: convolution.h.
#include <cstdint>

#include "tilegrid/core/host_device.h"
#include "tilegrid/grid/index_tree.h"

namespace tilegrid::grid {

struct Taps {
  int32_t size[3], stride[3], pad[3];
  bool transposed;
  int64_t volume;

  // Whether the kernel tiles its stride (K == s in every axis, not transposed: a U-Net's
  // 2x2x2 downsampling, pooling, coarsened_grid): each input then feeds exactly one output,
  // its parent, and the output grid's candidates are the inputs' parents, one a voxel.
  TG_HOST_DEVICE bool tiles_its_stride() const {
    if (transposed) return false;
    for (int a = 0; a < 3; ++a)
      if (size[a] != stride[a]) return false;
    return true;
  }

  // Axis a of the parent of input coordinate c where the kernel tiles its stride:
  // floor((c + pad) / stride).
  TG_HOST_DEVICE int32_t parent_of(int32_t c, int a) const {
    const int64_t i = int64_t(c) + pad[a], s = stride[a];
    return int32_t(i >= 0 ? i / s : -((-i + s - 1) / s));
  }

  // Tap t's per-axis index (t = (t_i * K_j + t_j) * K_k + t_k).
  TG_HOST_DEVICE void split(int64_t t, int32_t d[3]) const {
    d[2] = int32_t(t % size[2]);
    d[1] = int32_t((t / size[2]) % size[1]);
    d[0] = int32_t(t / (int64_t(size[2]) * size[1]));
  }

  // The input voxel that output `o` reads through tap t; false when there is none (a transposed
  // tap that does not divide, or a coordinate outside int32, which no grid holds).
  TG_HOST_DEVICE bool input_of(Coord o, int64_t t, Coord& in) const {
    int32_t d[3];
    split(t, d);
    const int64_t oc[3] = {o.i, o.j, o.k};
    int64_t ic[3];
    for (int a = 0; a < 3; ++a) {
      if (!transposed) {
        ic[a] = oc[a] * stride[a] + d[a] - pad[a];
      } else {
        const int64_t shifted = oc[a] + pad[a] - d[a];  // = i * stride
        if (shifted % stride[a] != 0) return false;
        ic[a] = shifted / stride[a];
      }
      if (ic[a] < INT32_MIN || ic[a] > INT32_MAX) return false;
    }
    in = {int32_t(ic[0]), int32_t(ic[1]), int32_t(ic[2])};
    return true;
  }

  // The output voxel that input `in` feeds through tap t (int64, the caller checks the int32
  // range); false when the tap lands between outputs of a strided convolution.
  TG_HOST_DEVICE bool output_of(Coord in, int64_t t, int64_t out[3]) const {
    int32_t d[3];
    split(t, d);
    const int64_t ic[3] = {in.i, in.j, in.k};
    for (int a = 0; a < 3; ++a) {
      if (transposed) {
        out[a] = ic[a] * stride[a] + d[a] - pad[a];
      } else {
        const int64_t shifted = ic[a] - d[a] + pad[a];  // = o * stride
        // Floor semantics for negative coordinates: exact division or no output.
        if (shifted % stride[a] != 0) return false;
        out[a] = shifted / stride[a];
      }
    }
    return true;
  }
};

}  // namespace tilegrid::grid
