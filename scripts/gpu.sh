#!/usr/bin/env bash
# On a GPU machine: build, run every test (GPU ones included, and the CUDA tests again under
# compute-sanitizer), run the benchmarks, and write logs + JSON into the folder given as the
# first argument. The last thing printed is a short summary table.
#
#   scripts/gpu.sh OUTDIR
#
# Expects: nvcc, CMake >= 3.25, ninja, a python3 with torch, nanobind, scikit-build-core and
# pytest. CUTLASS headers: TILEGRID_CUTLASS_INCLUDE_DIR, else .deps/cutlass/include, else the
# nvidia-cutlass package of that python3. Extra wheels for reference systems (e.g.
# liger-kernel) found in .whl/ are installed into a private folder first. See
# docs/DEVELOPING.md.
#
# The build goes to TILEGRID_BUILD_DIR (default /tmp/tilegrid-gpu-build), outside the
# checkout, so that a fresh copy of the sources reuses it; CUDA is compiled for this
# machine's GPUs only (TILEGRID_CUDA_ARCHS overrides), through ccache where it is installed
# (CCACHE_DIR, default ~/.cache/ccache: a fresh copy's new file times make ninja recompile,
# and ccache answers from the cache instead).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${1:?usage: scripts/gpu.sh OUTDIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ -z "${TILEGRID_CUTLASS_INCLUDE_DIR:-}" ] && [ -f .deps/cutlass/include/cute/tensor.hpp ]; then
  export TILEGRID_CUTLASS_INCLUDE_DIR=$PWD/.deps/cutlass/include
fi
# ccache copied next to the checkout (.deps/ccache/ccache, see docs/DEVELOPING.md) for a
# machine without the package.
if ! command -v ccache >/dev/null && [ -x .deps/ccache/ccache ]; then
  export PATH=$PWD/.deps/ccache:$PATH
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/tilegrid-bench-site .whl/*.whl \
    && export PYTHONPATH=/tmp/tilegrid-bench-site${PYTHONPATH:+:$PYTHONPATH}
fi

{ nvidia-smi; nvcc --version; $PY -c 'import torch; print("torch", torch.__version__)'; } >"$OUT/env.txt" 2>&1

# By default everything is compiled here, from source, with this machine's compilers: that is
# the build a change is validated on. For iterating on one kernel only,
# TILEGRID_PREBUILT_LIBRARY=FILE[.xz]: link a libtilegrid.a built elsewhere from these sources
# (scripts/prebuild_library.sh) instead of compiling src/; refused unless FILE.sources holds
# this checkout's source hash (scripts/source_hash.sh). Without it the define is passed empty,
# so that a build folder configured with a library earlier compiles src/ again.
prebuilt=(-C "cmake.define.TILEGRID_PREBUILT_LIBRARY=")
if [ -n "${TILEGRID_PREBUILT_LIBRARY:-}" ]; then
  want=$(cat "$TILEGRID_PREBUILT_LIBRARY.sources" 2>/dev/null || echo none)
  have=$(scripts/source_hash.sh)
  if [ "$want" != "$have" ]; then
    note "prebuilt library: its sources ($want) are not this checkout's ($have): refused"
    cat "$summary"; exit 1
  fi
  lib=$TILEGRID_PREBUILT_LIBRARY
  if [[ $lib == *.xz ]]; then
    xz -dc "$lib" >/tmp/tilegrid-prebuilt.a && lib=/tmp/tilegrid-prebuilt.a
  fi
  prebuilt=(-C "cmake.define.TILEGRID_PREBUILT_LIBRARY=$(realpath "$lib")")
  note "prebuilt library: $TILEGRID_PREBUILT_LIBRARY (sources $have)"
fi

BUILD=${TILEGRID_BUILD_DIR:-/tmp/tilegrid-gpu-build}
start=$(date +%s)
$PY -m pip install --no-build-isolation --no-deps -v \
  -C build-dir="$BUILD" \
  -C cmake.define.TILEGRID_BUILD_TESTS=ON \
  -C "cmake.define.TILEGRID_CUDA_ARCHS=${TILEGRID_CUDA_ARCHS:-}" \
  ${TILEGRID_SM90_COMPILE_JOBS:+-C cmake.define.TILEGRID_SM90_COMPILE_JOBS=$TILEGRID_SM90_COMPILE_JOBS} \
  ${TILEGRID_CUTLASS_INCLUDE_DIR:+-C cmake.define.TILEGRID_CUTLASS_INCLUDE_DIR=$TILEGRID_CUTLASS_INCLUDE_DIR} \
  "${prebuilt[@]}" . >"$OUT/build.log" 2>&1
build_rc=$?
note "build: rc=$build_rc in $(( $(date +%s) - start )) s ($BUILD)"
if [ $build_rc -ne 0 ]; then tail -40 "$OUT/build.log"; cat "$summary"; exit 1; fi
$PY scripts/slowest_units.py "$BUILD" >"$OUT/slowest_units.txt" 2>&1 && head -6 "$OUT/slowest_units.txt"

# Every step after the build is bounded (TILEGRID_STEP_TIMEOUT seconds, default 1800): a hung
# kernel ends its step with rc=124 instead of holding the GPU machine.
step() { timeout "${TILEGRID_STEP_TIMEOUT:-1800}" "$@"; }
# TILEGRID_CTEST=0 skips the C++ tests (a quick run on one Python-tested kernel).
: >"$OUT/tests.log"
if [ "${TILEGRID_CTEST:-1}" != 0 ]; then
  step ctest --test-dir "$BUILD" --output-on-failure -j 8 >"$OUT/tests.log" 2>&1
  note "ctest: rc=$? $(grep -E 'tests passed|tests failed' "$OUT/tests.log")"
fi
# TILEGRID_PYTEST="tests/python/attention -k sm90" narrows pytest (default: every test).
step $PY -m pytest -q -rs ${TILEGRID_PYTEST:-tests/python} >>"$OUT/tests.log" 2>&1
note "pytest: rc=$? $(tail -1 "$OUT/tests.log")"
# TILEGRID_AUDIT=1: the public API's bad and edge inputs on the GPU (bench/audit_api_inputs.py
# --device cuda; one process per case, each making its own CUDA context: minutes, so asked for).
if [ "${TILEGRID_AUDIT:-0}" = 1 ]; then
  step $PY bench/audit_api_inputs.py --device cuda --out "$OUT/cuda_api_audit.json" >"$OUT/audit.log" 2>&1
  note "API audit (cuda): rc=$? $(tail -1 "$OUT/audit.log")"
fi

# Memory errors and shared-memory races in every CUDA test (the *cuda* gtest cases), the
# attention backward's, the grid's and the sparse convolution's GPU tests. The tools are bound by
# the host's instrumentation work, not by the GPU: the runs go TILEGRID_SANITIZER_JOBS (default
# 6) at a time, the C++ cases in as many GoogleTest shards, each run with a log of its own under
# OUT/sanitizer/ (one run at a time takes more than 9 minutes on an H100).
# TILEGRID_SANITIZER=0 skips this part (quicker runs while iterating on one kernel).
if [ "${TILEGRID_SANITIZER:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  san=$OUT/sanitizer
  mkdir -p "$san"
  san_jobs=${TILEGRID_SANITIZER_JOBS:-6}
  # sanitize NAME TOOL COMMAND...: one run, its log, and a status line for the summary.
  sanitize() {
    local name=$1 tool=$2
    shift 2
    step compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" >"$san/$name.log" 2>&1
    echo "$name: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$san/$name.log" | tail -1)" \
      >"$san/$name.status"
  }
  # Starts a run in the background once fewer than san_jobs are running.
  start_run() {
    while [ "$(jobs -rp | wc -l)" -ge "$san_jobs" ]; do wait -n; done
    sanitize "$@" &
  }
  for tool in memcheck racecheck; do
    for ((shard = 0; shard < san_jobs; shard++)); do
      GTEST_TOTAL_SHARDS=$san_jobs GTEST_SHARD_INDEX=$shard start_run "cpp_${tool}_$shard" $tool \
        "$BUILD"/tests/cpp/tilegrid_tests --gtest_filter='*cuda*:*Cuda*'
    done
    # The attention backward is reached from Python: every kernel, head dims 64, 192 and 256,
    # one tile and several, varlen with empty sequences.
    start_run "attention_backward_$tool" $tool $PY -m pytest -q -x \
      tests/python/attention/test_flash_attn_backward.py \
      -k "gpu_autograd_varlen or (gpu_gradients and bfloat16 and (77-30 or 130-200 or 300-300 or 200-333))"
    # The sparse convolution's kernels (maps, gathered GEMMs with shared-memory tiles).
    start_run "sparse_conv_$tool" $tool $PY -m pytest -q -x tests/python/grid/test_sparse_conv.py \
      -k "cuda or gpu"
  done
  # The grid kernels are reached from Python: memcheck over their GPU tests.
  start_run grid_memcheck memcheck $PY -m pytest -q -x tests/python/grid/test_grid_cuda.py
  wait
  for status in "$san"/*.status; do note "compute-sanitizer $(cat "$status")"; done
fi

# TILEGRID_BENCH=grid (a list of names, space-separated) runs only bench/bench_grid.py etc.;
# TILEGRID_BENCH=" " runs none.
benches=bench/bench_*.py
[ -n "${TILEGRID_BENCH:-}" ] && benches=$(for b in $TILEGRID_BENCH; do echo "bench/bench_$b.py"; done)
# TILEGRID_BENCH_ARGS is split as the shell splits words, so quoted names with spaces stay one
# argument: TILEGRID_BENCH_ARGS='--systems tilegrid "torch SDPA cuDNN"'.
eval "bench_args=(${TILEGRID_BENCH_ARGS:-})"
for bench in $benches; do
  name=$(basename "$bench" .py)
  step $PY "$bench" --out "$OUT/$name.json" "${bench_args[@]}" >>"$OUT/bench.log" 2>&1
  note "$name: rc=$?"
done
# TILEGRID_DEMO=0 skips the demo (runs that only test or only benchmark).
if [ "${TILEGRID_DEMO:-1}" != 0 ]; then
  step $PY examples/demo.py >>"$OUT/bench.log" 2>&1
  note "demo: rc=$?"
fi

echo
cat "$summary"
echo
# (no bench.log when neither a benchmark nor the demo ran)
[ -f "$OUT/bench.log" ] && grep -v '^\s*$' "$OUT/bench.log" | tail -40
true
