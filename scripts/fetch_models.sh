#!/usr/bin/env bash
# Fetches the real scanned model that the demo and the grid benchmark voxelize: the Stanford
# Bunny (bunny00.off: 37,706 vertices, 75,408 triangles), shipped by Debian's libcgal-demo
# package (CGAL's data/meshes). Uses `apt-get download` (no root, no dependencies installed)
# and keeps only that file, in .deps/models/. Safe to run again; on a machine without apt it
# says so and the demo falls back to a generated sphere.
#
#   scripts/fetch_models.sh            # prints the model's path when it is there
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dest=.deps/models/bunny00.off
if [ ! -s "$dest" ]; then
  if ! command -v apt-get >/dev/null; then
    echo "fetch_models: no apt-get here; copy CGAL's data/meshes/bunny00.off to $dest" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -qq libcgal-demo >/dev/null 2>&1) || {
    echo "fetch_models: apt-get download libcgal-demo failed (no network or no package list?)" >&2
    exit 1
  }
  dpkg-deb -x "$work"/libcgal-demo_*.deb "$work/pkg"
  tar -xzf "$work/pkg/usr/share/doc/libcgal-dev/data.tar.gz" -C "$work" data/meshes/bunny00.off
  mkdir -p .deps/models
  mv "$work/data/meshes/bunny00.off" "$dest"
fi
echo "$dest"
