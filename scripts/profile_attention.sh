#!/usr/bin/env bash
# On a Hopper machine with Nsight Compute: profile tilegrid's attention forward (or backward:
# PROFILE_BACKWARD=1) and FlashAttention-3's on the same shapes (bench_attention.py's setup), one kernel launch each,
# every hardware counter of ncu's "full" set, into OUTDIR/ncu_attention.csv (ncu's raw page:
# one block per kernel, headed "# <shape> <system>"). bench/ncu_compare.py tabulates it.
#
#   scripts/profile_attention.sh OUTDIR [CASE ...]     CASE = head_dim:seqlen[:causal]
#
# tilegrid must be installed (scripts/gpu.sh does it); FlashAttention-3 is profiled when
# `import flash_attn_interface` works. The clocks are left alone (--clock-control none), so
# the counters describe the kernels as the benchmark times them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${1:?usage: scripts/profile_attention.sh OUTDIR [head_dim:seqlen[:causal] ...]}
shift
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(128:512 128:16384 128:16384:causal 64:16384 256:16384)
PY=${PYTHON:-python3}
csv="$OUT/ncu_attention.csv"
: >"$csv"
# PROFILE_SYSTEMS="FlashAttention-3" narrows the systems (default: both, FA3 when importable).
systems=(tilegrid)
$PY -c 'import flash_attn_interface' 2>/dev/null && systems+=(FlashAttention-3)
[ -n "${PROFILE_SYSTEMS:-}" ] && read -ra systems <<<"$PROFILE_SYSTEMS"
# PROFILE_BACKWARD=1 profiles the backward's main kernel instead of the forward (tilegrid's
# flash_bwd_sm90_kernel, FlashAttention-3's FlashAttnBwdSm90).
kernels='regex:flash_fwd_sm90_kernel|FlashAttnFwdSm90'
pass=()
if [ "${PROFILE_BACKWARD:-0}" = 1 ]; then
  kernels='regex:flash_bwd_sm90_kernel|FlashAttnBwdSm90'
  pass=(--backward)
fi
# PROFILE_SOURCE=1 also writes OUTDIR/ncu_source.csv: ncu's source page, every SASS
# instruction of each kernel with its executed count and sampled warp stall reasons.
reports=$(mktemp -d)
for case in "${cases[@]}"; do
  IFS=: read -r head_dim seqlen causal <<<"$case"
  for system in "${systems[@]}"; do
    heading="d$head_dim s$seqlen ${causal:-full} $system"
    report="$reports/${heading// /_}"
    ncu --clock-control none --set full --kernel-name-base demangled \
      -k "$kernels" --launch-skip 2 --launch-count 1 \
      -f -o "$report" $PY bench/profile_attention.py --system "$system" "${pass[@]}" \
      --head-dim "$head_dim" --seqlen "$seqlen" ${causal:+--causal} >/dev/null 2>&1
    echo "profiled $heading: rc=$?"
    echo "# $heading" >>"$csv"
    ncu -i "$report.ncu-rep" --page raw --csv --print-units base | grep -E '^"' >>"$csv"
    if [ "${PROFILE_SOURCE:-0}" = 1 ]; then
      echo "# $heading" >>"$OUT/ncu_source.csv"
      ncu -i "$report.ncu-rep" --page source --csv --print-source sass >>"$OUT/ncu_source.csv"
    fi
  done
done
rm -rf "$reports"
