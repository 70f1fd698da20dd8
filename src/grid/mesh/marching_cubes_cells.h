#pragma once
// Marching cubes over a grid's dual cells (internal; host and device code, so the CPU loops and
// the CUDA kernels make the same mesh): a cube joins 8 active voxel centres v + {0,1}^3;
// corners with field < level are inside. A vertex sits on each edge between two active
// neighbours v, v + e_a whose sides differ, owned by v (its a-th bit of cross_mask), at the
// linear interpolation of the level between the two centres; vertices are numbered by owner row
// and axis, so neighbouring cubes share them and the mesh is watertight. Triangles come from
// marching_cubes_table.h, their normals pointing to the outside (field >= level).
#include <cmath>
#include <cstdint>

#include "grid/batch_access.h"
#include "grid/mesh/marching_cubes_table.h"
#include "tilegrid/grid/index_tree.h"
#include "tilegrid/grid/transform.h"
#include "tilegrid/grid/trilinear.h"

namespace tilegrid::grid {

struct CubeInputs {
  TreeView tree;
  const VoxelTransform* transforms;
  const int64_t* voxel_offsets;  // [B + 1]
  int64_t num_grids;
  const int32_t* ijk;  // [N, 3] of every active voxel
  const void* field;   // [N]
  bool float64;
  double level;
  const MarchingCubesTable* table;
};

TG_HOST_DEVICE Coord voxel_ijk(const CubeInputs& in, int64_t r) {
  return {in.ijk[3 * r], in.ijk[3 * r + 1], in.ijk[3 * r + 2]};
}

TG_HOST_DEVICE bool is_inside(const CubeInputs& in, int64_t row) {
  return load_real(in.field, in.float64, row) < in.level;
}

// Pass 1 for voxel r: its crossing edges (bits 0-2), its cube's configuration (-1: a corner is
// inactive) and triangle count.
TG_HOST_DEVICE void cube_counts(const CubeInputs& in, int64_t r, uint8_t& cross_mask,
                                int32_t& config, int32_t& triangles) {
  const int64_t b = group_of(in.voxel_offsets, in.num_grids, r);
  const Coord v = voxel_ijk(in, r);
  const bool here = is_inside(in, r);
  CachedLookup lookup(in.tree, b);  // the neighbours and corners mostly share v's leaf
  cross_mask = 0;
  for (int a = 0; a < 3; ++a) {
    const Coord n{v.i + (a == 0), v.j + (a == 1), v.k + (a == 2)};
    const int64_t row = lookup.index_of(n);
    if (row >= 0 && is_inside(in, row) != here) cross_mask |= uint8_t(1 << a);
  }
  int c = 0;
  for (int n = 0; n < 8; ++n) {
    const Coord corner{v.i + ((n >> 2) & 1), v.j + ((n >> 1) & 1), v.k + (n & 1)};
    const int64_t row = n == 0 ? r : lookup.index_of(corner);
    if (row < 0) {
      config = -1;
      triangles = 0;
      return;
    }
    if (is_inside(in, row)) c |= 1 << n;
  }
  config = c;
  triangles = in.table->count[c];
}

// Pass 2 for voxel r: its vertices (positions and normals, world space) from vertex
// vertex_base[r] on, and its cube's triangles from triangle_base[r] on, as vertex numbers
// within the grid (vertex_first: the grid's first vertex).
TG_HOST_DEVICE void cube_write(const CubeInputs& in, int64_t r, const uint8_t* cross_mask,
                               const int64_t* vertex_base, int32_t config, int64_t triangle_base,
                               void* vertices, void* normals, int64_t* faces) {
  const int64_t b = group_of(in.voxel_offsets, in.num_grids, r);
  const VoxelTransform& tf = in.transforms[b];
  const Coord v = voxel_ijk(in, r);
  const double fv = load_real(in.field, in.float64, r);
  CachedLookup lookup(in.tree, b);  // the neighbours and corners mostly share v's leaf
  int64_t out = vertex_base[r];
  for (int a = 0; a < 3; ++a) {
    if (!((cross_mask[r] >> a) & 1)) continue;
    const Coord n{v.i + (a == 0), v.j + (a == 1), v.k + (a == 2)};
    const int64_t row = lookup.index_of(n);
    const double fn = load_real(in.field, in.float64, row);
    const double s = (in.level - fv) / (fn - fv);
    double u[3] = {double(v.i), double(v.j), double(v.k)};
    u[a] += s;
    double p[3];
    tf.voxel_to_world(u, p);
    // Normal: the gradient of the trilinear field where its 8 voxels are active, else the
    // edge's direction towards the outside.
    double g[3] = {0, 0, 0};
    const TrilinearCell cell = TrilinearCell::at(u);
    bool whole = cell.in_range;
    for (int c = 0; c < 8 && whole; ++c) {
      const int64_t cr = lookup.index_of(cell.voxel(c));
      if (cr < 0) {
        whole = false;
        break;
      }
      const double f = load_real(in.field, in.float64, cr);
      for (int ax = 0; ax < 3; ++ax) g[ax] += cell.weight_gradient(c, ax) * f;
    }
    if (!whole) {
      g[0] = g[1] = g[2] = 0;
      g[a] = fn > fv ? 1 : -1;
    }
    double len = 0;
    for (int ax = 0; ax < 3; ++ax) {
      g[ax] /= tf.voxel_size[ax];  // d/dworld
      len += g[ax] * g[ax];
    }
    len = len > 0 ? sqrt(len) : 1;
    for (int ax = 0; ax < 3; ++ax) {
      if (in.float64) {
        static_cast<double*>(vertices)[3 * out + ax] = p[ax];
        static_cast<double*>(normals)[3 * out + ax] = g[ax] / len;
      } else {
        static_cast<float*>(vertices)[3 * out + ax] = float(p[ax]);
        static_cast<float*>(normals)[3 * out + ax] = float(g[ax] / len);
      }
    }
    ++out;
  }
  if (config < 0) return;
  const int64_t vertex_first = vertex_base[in.voxel_offsets[b]];
  const int count = in.table->count[config];
  for (int t = 0; t < 3 * count; ++t) {
    int p, q;
    edge_corners(in.table->edges[config][t], p, q);
    const int a = (p ^ q) == 4 ? 0 : (p ^ q) == 2 ? 1 : 2;
    const Coord owner{v.i + ((p >> 2) & 1), v.j + ((p >> 1) & 1), v.k + (p & 1)};
    const int64_t row = p == 0 ? r : lookup.index_of(owner);
    const int below = cross_mask[row] & ((1 << a) - 1);  // the owner's vertices before axis a
    const int rank = (below & 1) + ((below >> 1) & 1);
    faces[3 * triangle_base + t] = vertex_base[row] + rank - vertex_first;
  }
}

}  // namespace tilegrid::grid
