#!/usr/bin/env bash
# Builds libtilegrid.a (the C++/CUDA library without the Python module or the tests) for the
# CUDA architectures given, on any machine with nvcc (no GPU needed), and writes it xz-packed
# with its sources' hash beside it, for a GPU machine to link instead of compiling src/
# (scripts/gpu.sh with TILEGRID_PREBUILT_LIBRARY; docs/DEVELOPING.md). It leaves out the
# compressed-.nvdb codecs, so that linking it needs neither zlib nor c-blosc:
#
#   scripts/prebuild_library.sh 90 .deps/libtilegrid-sm90.a.xz    # -> also .deps/libtilegrid-sm90.a.xz.sources
#
# The build folder is build/prebuilt-<archs>, incremental (and through ccache where installed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
archs=${1:?usage: scripts/prebuild_library.sh ARCHS OUT.a.xz}
out=${2:?usage: scripts/prebuild_library.sh ARCHS OUT.a.xz}
dir=build/prebuilt-${archs//;/-}
cutlass=()
[ -f .deps/cutlass/include/cute/tensor.hpp ] && cutlass=(-DTILEGRID_CUTLASS_INCLUDE_DIR="$PWD/.deps/cutlass/include")
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEGRID_CUDA_ARCHS="$archs" \
  -DTILEGRID_BUILD_TESTS=OFF -DTILEGRID_NVDB_CODECS=OFF "${cutlass[@]}" >/dev/null
cmake --build "$dir" --target tilegrid
mkdir -p "$(dirname "$out")"
xz -T0 -c "$dir/src/libtilegrid.a" >"$out"
scripts/source_hash.sh >"$out.sources"
echo "wrote $out ($(du -h "$out" | cut -f1)), sources $(cat "$out.sources")"
