#!/usr/bin/env bash
# Builds a tilegrid wheel into dist/ and proves it: installs it into a fresh virtual
# environment and runs scripts/wheel_smoke_test.py there (CPU ops everywhere; attention
# forward + backward and a grid op on the GPU where one is present).
#
#   scripts/build_wheel.sh                      # portable kernels for sm_80, Hopper kernels for sm_90a
#   TILEGRID_CUDA_ARCHS="80;86;90+PTX" scripts/build_wheel.sh
#   TILEGRID_ENABLE_CUDA=OFF scripts/build_wheel.sh   # a CPU-only wheel
#
# Needs what the source build needs (docs/DEVELOPING.md): CMake >= 3.25, ninja, a C++20
# compiler, nvcc for the CUDA kernels, and a python3 with torch, nanobind, scikit-build-core
# and the CUTLASS headers (nvidia-cutlass, or TILEGRID_CUTLASS_INCLUDE_DIR). The wheel is
# tagged for this platform (linux_x86_64), links the CUDA runtime statically and needs the
# NVIDIA driver and torch at run time, nothing else.
#
# The test environment reuses the building python's torch (a wheel user installs torch first,
# as for every PyTorch extension). Times go to
# dist/build_report.txt: build, wheel size, pip install, first import, the smoke test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
archs=${TILEGRID_CUDA_ARCHS-80;90}
cuda=${TILEGRID_ENABLE_CUDA:-ON}
build_dir=${TILEGRID_WHEEL_BUILD_DIR:-build/wheel}
report=dist/build_report.txt
mkdir -p dist
rm -f dist/tilegrid-*.whl

start=$(date +%s%N)
$PY -m pip wheel --no-build-isolation --no-deps -w dist \
  -C build-dir="$build_dir" \
  -C cmake.define.TILEGRID_ENABLE_CUDA="$cuda" \
  -C cmake.define.TILEGRID_CUDA_ARCHS="$archs" \
  ${TILEGRID_CUTLASS_INCLUDE_DIR:+-C cmake.define.TILEGRID_CUTLASS_INCLUDE_DIR=$TILEGRID_CUTLASS_INCLUDE_DIR} \
  .
build_s=$(( ($(date +%s%N) - start) / 1000000 ))
wheel=$(ls dist/tilegrid-*.whl)

venv=$(mktemp -d)/venv
$PY -m venv "$venv"
# The building python's site-packages (its torch) after the fresh environment's own, through a
# .pth file: --system-site-packages would not see them when $PY is itself a virtual environment.
venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
$PY -c 'import sysconfig; print(sysconfig.get_path("purelib")); print(sysconfig.get_path("platlib"))' \
  | sort -u >"$venv_site/building_python.pth"
start=$(date +%s%N)
"$venv/bin/python" -m pip install -q --no-deps --no-index "$wheel"
install_s=$(( ($(date +%s%N) - start) / 1000000 ))
# The smoke test runs from another folder, so that `import tilegrid` cannot find the sources.
start=$(date +%s%N)
(cd "$(dirname "$venv")" && "$venv/bin/python" -c "import tilegrid")
import_s=$(( ($(date +%s%N) - start) / 1000000 ))
start=$(date +%s%N)
(cd "$(dirname "$venv")" && "$venv/bin/python" "$OLDPWD/scripts/wheel_smoke_test.py")
smoke_s=$(( ($(date +%s%N) - start) / 1000000 ))
rm -rf "$(dirname "$venv")"

{
  echo "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1), $(stat -c %s "$wheel") bytes)"
  echo "CUDA: $cuda, TILEGRID_CUDA_ARCHS=$archs; $(nproc) cores"
  echo "build ${build_s} ms; pip install ${install_s} ms; first import ${import_s} ms; smoke test ${smoke_s} ms"
} | tee "$report"
