#!/usr/bin/env bash
# Fetches the real data the demo, the examples and the grid benchmarks use, from Debian's
# libcgal-demo package (CGAL's data sets), into .deps/models/:
# - the Stanford Bunny (data/meshes/bunny00.off: 37,706 vertices, 75,408 triangles, a 3D scan),
#   voxelized by the demo and the grid benchmark;
# - an aerial LiDAR scan with labels (data/points_3/b9_training.ply: 22,300 points, 2,447 of them
#   labelled ground, vegetation or roof), segmented by the demo's sparse U-Net;
# - CGAL's 138 test meshes (data/meshes/*.off, 29 MB) in .deps/models/cgal_meshes/, the shapes
#   examples/generate_shapes.py learns to generate. A different count fails (the example's
#   train / held-out split is drawn over the file list); contents unlike libcgal-demo 5.5.1-2's
#   (a SHA-256 of the files' checksums) only warn. The files' checksums are kept in
#   SHA256SUMS there, and a later run fetches them again when one no longer matches.
# Uses `apt-get download` (no root, no dependencies installed) and keeps only those files. Safe
# to run again: it downloads nothing when every file is there and the meshes check out; on a
# machine without apt it says so and the demo does without them.
#
#   scripts/fetch_models.sh            # prints the files' paths when they are there
set -uo pipefail
export LC_ALL=C  # SHA256SUMS lists the meshes in byte order
cd "$(dirname "${BASH_SOURCE[0]}")/.."
files=(data/meshes/bunny00.off data/points_3/b9_training.ply)
meshes=.deps/models/cgal_meshes
mesh_count=138
mesh_digest=68c8a6b354750118dd32e415a426231544c85b541ce57bfead8943da5f0ef7fa  # SHA256SUMS of 5.5.1-2

count_meshes() { find "$meshes" -maxdepth 1 -name '*.off' 2>/dev/null | wc -l; }

missing=()
for f in "${files[@]}"; do [ -s ".deps/models/$(basename "$f")" ] || missing+=("$f"); done
meshes_ok=0
if [ "$(count_meshes)" -eq "$mesh_count" ] && [ -s "$meshes/SHA256SUMS" ] &&
   (cd "$meshes" && sha256sum --quiet --status -c SHA256SUMS); then
  meshes_ok=1
fi
if [ ${#missing[@]} -gt 0 ] || [ $meshes_ok -eq 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "fetch_models: no apt-get here; copy CGAL's ${missing[*]} to .deps/models/ and its" \
         "data/meshes/*.off to $meshes/" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -qq libcgal-demo >/dev/null 2>&1) || {
    echo "fetch_models: apt-get download libcgal-demo failed (no network or no package list?)" >&2
    exit 1
  }
  dpkg-deb -x "$work"/libcgal-demo_*.deb "$work/pkg"
  data="$work/pkg/usr/share/doc/libcgal-dev/data.tar.gz"
  mkdir -p .deps/models
  if [ ${#missing[@]} -gt 0 ]; then
    tar -xzf "$data" -C "$work" "${missing[@]}"
    for f in "${missing[@]}"; do mv "$work/$f" ".deps/models/$(basename "$f")"; done
  fi
  if [ $meshes_ok -eq 0 ]; then
    tar -xzf "$data" -C "$work" --wildcards 'data/meshes/*.off'
    rm -rf "$meshes" && mv "$work/data/meshes" "$meshes"
    found=$(count_meshes)
    if [ "$found" -ne "$mesh_count" ]; then
      echo "fetch_models: expected $mesh_count meshes in libcgal-demo's data/meshes, found" \
           "$found ($(dpkg-deb -f "$work"/libcgal-demo_*.deb Version)); removed them" >&2
      rm -rf "$meshes"
      exit 1
    fi
    (cd "$meshes" && sha256sum -- *.off >SHA256SUMS)
    if [ "$(sha256sum <"$meshes/SHA256SUMS" | cut -d' ' -f1)" != "$mesh_digest" ]; then
      echo "fetch_models: warning: the meshes of libcgal-demo" \
           "$(dpkg-deb -f "$work"/libcgal-demo_*.deb Version) differ from 5.5.1-2's, on which" \
           "bench/results/*generate_shapes*.json were measured" >&2
    fi
  fi
fi
for f in "${files[@]}"; do echo ".deps/models/$(basename "$f")"; done
echo "$meshes/ ($(count_meshes) meshes)"
