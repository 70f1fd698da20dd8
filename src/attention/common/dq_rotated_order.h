#pragma once
// deterministic=True: the order in which the key tiles of one (K/V head, sequence) add into a
// query tile's float32 dQ sums when every key tile sees every query tile (no causal or window
// mask cuts the tile grid) and all of the sequence's key tiles can be resident on the GPU at
// once (internal; CPU and CUDA code).
//
// Key tile n walks the query tiles from tile rotation(n) = floor(n M / N) on, wrapping around,
// and the key tiles add into query tile m in the order they reach it: key tile n reaches m at
// its step (m - rotation(n)) mod M, ties (N > M) in key-tile order. Key tiles that start
// together then reach a query tile at different steps and do not wait for each other. In the
// order where every key tile walks the query tiles from 0 and they add into each in key-tile
// order, key tile n waits for key tile n - 1 at every step: the sequence's M steps take about
// M + N - 1 (1.5x at 16k tokens, M = 256, N = 128).
//
// Waiting for a key tile that reaches m at an earlier step cannot deadlock once every key tile
// is running (the one at the smallest step never waits); the caller chooses this order only
// when they all fit on the GPU together (flash_bwd_sm90_launch.cuh).
#include <cstdint>

#include "tilegrid/core/host_device.h"

namespace tilegrid::attention {

struct RotatedDqOrder {
  int key_tiles = 0;    // N; 0: the order is not in use
  int query_tiles = 0;  // M

  TG_HOST_DEVICE bool active() const { return key_tiles > 0 && query_tiles > 0; }

  // The query tile that key tile n visits first.
  TG_HOST_DEVICE int rotation(int n) const { return int(int64_t(n) * query_tiles / key_tiles); }

  // The query tile of key tile n's step t (t in [0, M)).
  TG_HOST_DEVICE int tile_at(int n, int t) const {
    const int m = t + rotation(n);
    return m < query_tiles ? m : m - query_tiles;
  }

  // How many key tiles add into query tile m before key tile n does.
  TG_HOST_DEVICE int turn(int n, int m) const {
    const int r = rotation(n);
    const int tied_before = n - first_with_rotation(r);
    // Key tiles whose rotation lies in (r, m] going round: they reach m at a smaller step.
    const int earlier = r <= m
                            ? first_with_rotation(m + 1) - first_with_rotation(r + 1)
                            : key_tiles - first_with_rotation(r + 1) + first_with_rotation(m + 1);
    return tied_before + earlier;
  }

 private:
  // The first key tile whose rotation is at least x (x in [0, M]): ceil(x N / M).
  TG_HOST_DEVICE int first_with_rotation(int64_t x) const {
    return int((x * key_tiles + query_tiles - 1) / query_tiles);
  }
};

}  // namespace tilegrid::attention
