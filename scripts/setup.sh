#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian/Ubuntu machine: system packages (when missing and we
# may install them), a virtual environment in .venv with requirements-dev.txt, and the build
# (C++ library, GoogleTest suite and the Python package, one CMake tree in build/python).
# Sourced by demo.sh and test.sh; safe to run again: finished steps are skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
for cmd in cmake ninja g++; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
[ -f /usr/include/gtest/gtest.h ] || missing+=(gtest)
# Optional: NanoVDB's headers, for the test that NanoVDB reads our .nvdb files (asked for only
# where the package index knows them, so machines without the package do not retry each run).
if [ ! -f /usr/include/nanovdb/NanoVDB.h ] && apt-cache show libnanovdb-dev >/dev/null 2>&1; then
  missing+=(nanovdb)
fi
# Optional too: ccache, so that a rebuild (another clone, a rerun) compiles only what changed.
command -v ccache >/dev/null || missing+=(ccache)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing system packages for: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake ninja-build g++ libgtest-dev python3-venv ccache >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnanovdb-dev >/dev/null ||
      echo "setup: libnanovdb-dev not available here: the NanoVDB interop test will not be built"
  elif [[ " ${missing[*]} " =~ ^( nanovdb| ccache)+\ $ ]]; then
    echo "setup: optional: install ${missing[*]/nanovdb/libnanovdb-dev} (NanoVDB interop test; compiler cache)"
  else
    echo "setup: please install: ${missing[*]} (Debian: cmake ninja-build g++ libgtest-dev)" >&2
    exit 1
  fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
stamp=.venv/.requirements-installed
if [ ! -f "$stamp" ] || ! cmp -s requirements-dev.txt "$stamp"; then
  # torch 2.11 with the CUDA libraries it depends on takes 5.3 GB in .venv: say so before pip
  # stops half-way with "No space left on device".
  free_kib=$(df -Pk .venv | awk 'NR == 2 { print $4 }')
  if [ -z "$(ls -A .venv/lib/python3*/site-packages/torch 2>/dev/null)" ] && [ "${free_kib:-0}" -lt $((6 * 1024 * 1024)) ]; then
    echo "setup: the Python packages need about 6 GB in .venv (torch with its CUDA libraries is 5.3 GB);" \
         "$(df -Ph .venv | awk 'NR == 2 { print $4 }') is free on $(df -P .venv | awk 'NR == 2 { print $6 }')" >&2
    exit 1
  fi
  echo "setup: installing Python packages (first time: torch is large, a few minutes)"
  python -m pip install -q --upgrade pip
  python -m pip install -q -r requirements-dev.txt
  cp requirements-dev.txt "$stamp"
fi

# CUDA is compiled for the GPUs of this machine (CMake asks nvidia-smi); on a machine without
# a GPU the CPU library is built, unless TILEGRID_CUDA_ARCHS names architectures to compile
# for (e.g. "check": every CUDA unit once, as CI does; "80;90": a library for those GPUs).
gpus=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true)
cuda=OFF
if ! command -v nvcc >/dev/null; then
  echo "setup: no nvcc on PATH: building the CPU-only library"
elif [ -n "$gpus" ] || [ -n "${TILEGRID_CUDA_ARCHS:-}" ]; then
  cuda=ON
  echo "setup: building with CUDA ($(nvcc --version | tail -1)) for ${TILEGRID_CUDA_ARCHS:-the GPUs here: $(echo $gpus)}"
else
  echo "setup: no GPU here: building the CPU-only library (TILEGRID_CUDA_ARCHS=check compiles the CUDA kernels too)"
fi
# One build tree for the library, the C++ tests and the Python module; incremental on reruns.
python -m pip install -q --no-build-isolation --no-deps \
  -C build-dir=build/python \
  -C cmake.define.TILEGRID_BUILD_TESTS=ON \
  -C cmake.define.TILEGRID_ENABLE_CUDA=$cuda \
  -C "cmake.define.TILEGRID_CUDA_ARCHS=${TILEGRID_CUDA_ARCHS:-}" \
  ${TILEGRID_CUTLASS_INCLUDE_DIR:+-C cmake.define.TILEGRID_CUTLASS_INCLUDE_DIR=$TILEGRID_CUTLASS_INCLUDE_DIR} \
  .
