#pragma once
// The marching-cubes case table, derived here at compile time from the cube's faces (rather
// than typed in): for each of the 256 inside/outside patterns of a cube's 8 corners, the
// triangles (as triples of cube edges) of the surface that separates them.
//
// Corner n of a cube has offsets (n >> 2 & 1, n >> 1 & 1, n & 1) along (i, j, k), as
// TrilinearCell. Edge e = 4 a + m joins the two corners that differ in axis a (a = 0, 1, 2)
// and share the other two offsets, m being those two bits in (i, j, k) order.
//
// Derivation: on each face, the corners of opposite sides are separated by segments between
// the face's crossing edges; a face with two diagonal inside corners (the ambiguous case) cuts
// off each inside corner. That choice depends only on the face's 4 corners, so two cubes that
// share a face cut it alike and the mesh is watertight. Each segment is directed with the
// inside corners on its left seen from outside the cube; the segments close into loops, and
// each loop is fanned into triangles whose normals point to the outside (the corners whose
// value is not below the level).
#include <cstdint>

namespace tilegrid::grid {

constexpr int kMaxCubeTriangles = 10;  // 12 crossing edges in at least one loop

struct MarchingCubesTable {
  uint8_t count[256];
  int8_t edges[256][3 * kMaxCubeTriangles];
};

namespace mc_detail {

constexpr int bit(int n, int a) { return (n >> (2 - a)) & 1; }

// The edge between corners p and q (differing in exactly one axis).
constexpr int edge_of(int p, int q) {
  const int x = p ^ q;
  const int a = x == 4 ? 0 : x == 2 ? 1 : 2;
  int m = 0;
  for (int b = 0; b < 3; ++b)
    if (b != a) m = 2 * m + bit(p, b);
  return 4 * a + m;
}

// Twice the position of edge e's midpoint, and of corner n.
constexpr void edge_point(int e, int out[3]) {
  const int a = e / 4, m = e % 4;
  int other[2] = {(m >> 1) & 1, m & 1}, o = 0;
  for (int b = 0; b < 3; ++b) out[b] = b == a ? 1 : 2 * other[o++];
}
constexpr void corner_point(int n, int out[3]) {
  for (int b = 0; b < 3; ++b) out[b] = 2 * bit(n, b);
}

// Orients segment (e0, e1) on the face with outward normal axis a, sign s (+1/-1) so that
// corner x lies on its left seen from outside: returns true if e0 -> e1 already does.
constexpr bool left_of(int e0, int e1, int x, int a, int s) {
  int p[3] = {}, q[3] = {}, c[3] = {};
  edge_point(e0, p);
  edge_point(e1, q);
  corner_point(x, c);
  const int u[3] = {q[0] - p[0], q[1] - p[1], q[2] - p[2]};
  const int v[3] = {c[0] - p[0], c[1] - p[1], c[2] - p[2]};
  const int cross[3] = {u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]};
  return cross[a] * s > 0;
}

// Faces (2 axis + side) of edge e: the two axes other than its own, at its offsets there.
constexpr int face_bits(int e) {
  const int a = e / 4, m = e % 4;
  int bits = 0, o = 0;
  const int side[2] = {(m >> 1) & 1, m & 1};
  for (int b = 0; b < 3; ++b)
    if (b != a) bits |= 1 << (2 * b + side[o++]);
  return bits;
}

constexpr bool in_one_face(int e0, int e1, int e2) {
  return (face_bits(e0) & face_bits(e1) & face_bits(e2)) != 0;
}

constexpr MarchingCubesTable make_table() {
  MarchingCubesTable t{};
  for (int config = 0; config < 256; ++config) {
    const auto inside = [&](int n) { return (config >> n) & 1; };
    int next[12];  // directed segments: next[e] = the edge the segment from e goes to
    for (int e = 0; e < 12; ++e) next[e] = -1;
    for (int a = 0; a < 3; ++a)
      for (int side = 0; side < 2; ++side) {
        // The face's corners in cyclic order.
        int c[4] = {}, k = 0;
        for (int n = 0; n < 8; ++n)
          if (bit(n, a) == side) c[k++] = n;
        const int tmp = c[2];  // (00, 01, 10, 11) in the two free bits -> cycle 00, 01, 11, 10
        c[2] = c[3];
        c[3] = tmp;
        const int s = side ? 1 : -1;
        int crossing[4] = {}, ncross = 0;
        for (int i = 0; i < 4; ++i)
          if (inside(c[i]) != inside(c[(i + 1) % 4])) crossing[ncross++] = i;  // edge c[i]c[i+1]
        const auto face_edge = [&](int i) { return edge_of(c[i], c[(i + 1) % 4]); };
        const auto add = [&](int e0, int e1, int x) {
          if (left_of(e0, e1, x, a, s))
            next[e0] = e1;
          else
            next[e1] = e0;
        };
        if (ncross == 2) {
          int x = -1;
          for (int i = 0; i < 4; ++i)
            if (inside(c[i])) x = c[i];
          add(face_edge(crossing[0]), face_edge(crossing[1]), x);
        } else if (ncross == 4) {  // diagonal: cut off each inside corner
          for (int i = 0; i < 4; ++i)
            if (inside(c[i])) add(face_edge((i + 3) % 4), face_edge(i), c[i]);
        }
      }
    // Loops, fanned into triangles (reversed so that normals point outside).
    bool used[12] = {};
    int tri = 0;
    for (int start = 0; start < 12; ++start) {
      if (next[start] < 0 || used[start]) continue;
      int loop[12] = {}, len = 0;
      for (int e = start; !used[e]; e = next[e]) {
        used[e] = true;
        loop[len++] = e;
      }
      // The fan's apex: the first loop vertex from which no triangle lies in a cube face
      // (possible on loops through an ambiguous face: such a flat triangle would duplicate
      // the neighbouring cube's, leaving the mesh non-manifold).
      int apex = 0;
      for (int s0 = 0; s0 < len; ++s0) {
        bool flat = false;
        for (int i = 1; i + 1 < len && !flat; ++i)
          flat = in_one_face(loop[s0], loop[(s0 + i) % len], loop[(s0 + i + 1) % len]);
        if (!flat) {
          apex = s0;
          break;
        }
      }
      for (int i = 1; i + 1 < len; ++i) {
        t.edges[config][3 * tri] = int8_t(loop[apex]);
        t.edges[config][3 * tri + 1] = int8_t(loop[(apex + i + 1) % len]);
        t.edges[config][3 * tri + 2] = int8_t(loop[(apex + i) % len]);
        ++tri;
      }
    }
    t.count[config] = uint8_t(tri);
  }
  return t;
}

}  // namespace mc_detail

inline constexpr MarchingCubesTable kMarchingCubesTable = mc_detail::make_table();

// The two corners of edge e.
constexpr void edge_corners(int e, int& p, int& q) {
  const int a = e / 4, m = e % 4;
  int other[2] = {(m >> 1) & 1, m & 1}, o = 0, bits = 0;
  for (int b = 0; b < 3; ++b) bits = 2 * bits + (b == a ? 0 : other[o++]);
  p = bits;
  q = bits | (4 >> a);
}

}  // namespace tilegrid::grid
