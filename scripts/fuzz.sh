#!/usr/bin/env bash
# Fuzzes the PLY, OFF and .nvdb readers through the Python API for SECONDS each (atheris, see
# tests/fuzz/fuzz_readers.py), from the committed seeds plus .nvdb seeds written by tg.save.
# Fails on a crash, a hang (over 10 s on one input), memory past 3 GB or an exception other
# than the documented ones; the input that did it is kept and its path printed.
#
#   scripts/fuzz.sh 50        # ~3 minutes in all: CI's budget
# Needs the build (scripts/setup.sh) and atheris (requirements-dev.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:?usage: scripts/fuzz.sh SECONDS (per reader)}
[ -f .venv/bin/activate ] && source .venv/bin/activate

work=$(mktemp -d -t tilegrid-fuzz-XXXXXX)
python tests/fuzz/make_seeds.py --large "$work/seeds"
failed=()
for reader in ply off nvdb; do
  mkdir -p "$work/$reader"
  # A .nvdb seed with voxels is ~300 KB (an upper node is 270 KB); text files stay small.
  max_len=8192
  [ "$reader" = nvdb ] && max_len=400000
  echo "== fuzzing the $reader reader for ${seconds} s =="
  if TILEGRID_FUZZ_STATS="$work/$reader.json" python tests/fuzz/fuzz_readers.py "$reader" \
      "$work/$reader" "tests/fuzz/corpus/$reader" "$work/seeds/$reader" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len="$max_len" \
      -artifact_prefix="$work/$reader-" >"$work/$reader.log" 2>&1; then
    echo "$reader: $(cat "$work/$reader.json") ($(grep -o 'Done [0-9]* runs' "$work/$reader.log"))"
  else
    failed+=("$reader")
    tail -n 40 "$work/$reader.log"
    echo "$reader: FAILED; log $work/$reader.log, input(s): $(ls "$work/$reader"-* 2>/dev/null)"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in ${failed[*]} (kept in $work)"
  exit 1
fi
rm -rf "$work"
echo "fuzz: no crash, hang or undocumented error"
