#!/usr/bin/env bash
# Fetches the real data the demo and the grid benchmarks use, from Debian's libcgal-demo package
# (CGAL's data sets), into .deps/models/:
# - the Stanford Bunny (data/meshes/bunny00.off: 37,706 vertices, 75,408 triangles, a 3D scan),
#   voxelized by the demo and the grid benchmark;
# - an aerial LiDAR scan with labels (data/points_3/b9_training.ply: 22,300 points, 2,447 of them
#   labelled ground, vegetation or roof), segmented by the demo's sparse U-Net.
# Uses `apt-get download` (no root, no dependencies installed) and keeps only those files. Safe
# to run again; on a machine without apt it says so and the demo does without them.
#
#   scripts/fetch_models.sh            # prints the files' paths when they are there
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
files=(data/meshes/bunny00.off data/points_3/b9_training.ply)
missing=()
for f in "${files[@]}"; do [ -s ".deps/models/$(basename "$f")" ] || missing+=("$f"); done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "fetch_models: no apt-get here; copy CGAL's ${missing[*]} to .deps/models/" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -qq libcgal-demo >/dev/null 2>&1) || {
    echo "fetch_models: apt-get download libcgal-demo failed (no network or no package list?)" >&2
    exit 1
  }
  dpkg-deb -x "$work"/libcgal-demo_*.deb "$work/pkg"
  tar -xzf "$work/pkg/usr/share/doc/libcgal-dev/data.tar.gz" -C "$work" "${missing[@]}"
  mkdir -p .deps/models
  for f in "${missing[@]}"; do mv "$work/$f" ".deps/models/$(basename "$f")"; done
fi
for f in "${files[@]}"; do echo ".deps/models/$(basename "$f")"; done
