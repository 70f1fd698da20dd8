#!/usr/bin/env bash
# Fuzzes the file readers, each target for its own number of seconds, from the committed seeds
# plus .nvdb seeds written by tg.save and the NanoVDB 32.9 files of tests/data/nvdb:
#   ply, off, nvdb  through the Python API (atheris, tests/fuzz/fuzz_readers.py): tg.read_ply and
#                   tg.read_off (Python readers), tg.load (the C++ .nvdb reader, unsanitized);
#   nvdb-cpp        the C++ .nvdb reader through libFuzzer (tests/fuzz/fuzz_nvdb_reader.cpp) as
#                   built in $TILEGRID_FUZZ_BUILD (default build/ci-asan: CI's clang build with
#                   -DTILEGRID_FUZZERS=ON, under AddressSanitizer + UndefinedBehaviorSanitizer).
# Fails on a crash, a sanitizer report, a hang (over 10 s on one input), memory past 3 GB or an
# exception other than the documented ones; the input that did it is kept and its path printed.
#
#   scripts/fuzz.sh 50                                    # ply, off and nvdb, 50 s each
#   scripts/fuzz.sh ply=35 off=35 nvdb=15 nvdb-cpp=65     # CI's run: ~3 minutes in all
# Needs the build (scripts/setup.sh) and atheris (requirements-dev.txt); nvdb-cpp needs clang.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage="usage: scripts/fuzz.sh SECONDS | TARGET=SECONDS... (targets: ply off nvdb nvdb-cpp)"
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
if [ $# -eq 1 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  set -- "ply=$1" "off=$1" "nvdb=$1"
fi
for run in "$@"; do
  [[ $run =~ ^(ply|off|nvdb|nvdb-cpp)=[0-9]+$ ]] || { echo "$usage" >&2; exit 2; }
done
[ -f .venv/bin/activate ] && source .venv/bin/activate
build=${TILEGRID_FUZZ_BUILD:-build/ci-asan}

work=$(mktemp -d -t tilegrid-fuzz-XXXXXX)
# The harnesses write each input to a file before reading it: in memory where there is
# /dev/shm, since rewriting a file on disk at every input (ext4 flushes a file truncated and
# written again when it is closed) made the .nvdb runs 1.9 (Python) and 7 (C++) times slower.
scratch=$(mktemp -d -p "$([ -d /dev/shm ] && echo /dev/shm || echo "$work")" tilegrid-fuzz-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
python tests/fuzz/make_seeds.py --large "$work/seeds"
failed=()
for run in "$@"; do
  target=${run%=*} seconds=${run#*=}
  reader=${target%-cpp}
  mkdir -p "$work/$target"
  # A .nvdb seed with voxels is ~300 KB (an upper node is 270 KB); text files stay small.
  max_len=8192
  [ "$reader" = nvdb ] && max_len=400000
  flags=("$work/$target" "tests/fuzz/corpus/$reader" "$work/seeds/$reader")
  # The .nvdb files NanoVDB 32.9 wrote as fVDB saves them (compressed, 4-16 KB) seed the new
  # format's paths: OnIndex and typed grids, fVDB's records, ZIP and BLOSC.
  [ "$reader" = nvdb ] && flags+=("tests/data/nvdb")
  flags+=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len="$max_len"
         -artifact_prefix="$work/$target.failed-")
  if [ "$target" = nvdb-cpp ]; then
    harness=("$build/tests/fuzz/fuzz_nvdb_reader")
    if [ ! -x "${harness[0]}" ]; then
      echo "nvdb-cpp: ${harness[0]} not built (configure $build with clang and -DTILEGRID_FUZZERS=ON)"
      failed+=("$target")
      continue
    fi
  else
    harness=(python tests/fuzz/fuzz_readers.py "$reader")
  fi
  echo "== fuzzing $target for ${seconds} s =="
  if TMPDIR=$scratch TILEGRID_FUZZ_STATS="$work/$target.json" UBSAN_OPTIONS=print_stacktrace=1 \
      "${harness[@]}" "${flags[@]}" >"$work/$target.log" 2>&1; then
    echo "$target: $(cat "$work/$target.json") ($(grep -o 'Done [0-9]* runs' "$work/$target.log"))"
  else
    failed+=("$target")
    tail -n 40 "$work/$target.log"
    echo "$target: FAILED; log $work/$target.log, input(s): $(ls "$work/$target".failed-* 2>/dev/null)"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in ${failed[*]} (kept in $work)"
  exit 1
fi
rm -rf "$work"
echo "fuzz: no crash, hang, sanitizer report or undocumented error"
