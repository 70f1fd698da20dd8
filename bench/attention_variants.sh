#!/usr/bin/env bash
# On a Hopper GPU machine: builds configurations of the attention backward
# (src/attention/sm90/flash_bwd_sm90_config.h) next to the shipped one, each as a bf16 shared
# library of bench/cuda/attention_backward_variant.cu, all compiled in parallel (no library
# build), then times and checks them with bench/bench_attention_backward_variants.py at head
# dims 64/128/256, 2k and 16k tokens, causal and not. The last thing printed is the table.
# KIND=forward does the same for the forward's register split (bench/cuda/
# attention_forward_variant.cu, bench/bench_attention_forward_variants.py; a variant's fields
# past its name are read as for the backward, only producer_regs matters).
#
#   bench/attention_variants.sh [OUTDIR]        (default /tmp/tilegrid-attention-variants-KIND)
#
# Environment: HEAD_DIMS ("64 128 256"), SEQLENS ("2048 16384"), VARIANTS (a list of
# name:fast_exp2:dq_atomic:stages for every head dim instead of the built-in lists), BASELINE_TREE
# (another checkout, e.g. `git worktree add /tmp/base main`: its shipped configuration is built
# from its own sources as the variant "baseline", to time a kernel change against the tree it
# came from in one run), JOBS (parallel compiles,
# default: cores, at most 16), TILEGRID_CUTLASS_INCLUDE_DIR (else .deps/cutlass/include, else
# the nvidia-cutlass package of python3). ptxas's registers / spills of every variant go to
# OUTDIR/ptxas.txt; BUILD_ONLY=1 stops there (a machine without a GPU). 11 units of ~40-90 s each: about 2 minutes on 16 cores, the run ~2 more.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KIND=${KIND:-backward}
case $KIND in backward|forward) ;; *) echo "KIND must be backward or forward, got $KIND" >&2; exit 1 ;; esac
OUT=${1:-/tmp/tilegrid-attention-variants-$KIND}
HEAD_DIMS=${HEAD_DIMS:-64 128 256}
SEQLENS=${SEQLENS:-2048 16384}
mkdir -p "$OUT/lib" "$OUT/log"
OUT=$(cd "$OUT" && pwd)  # the compiles run in the tree they build
export PYTHONUNBUFFERED=1

cutlass=${TILEGRID_CUTLASS_INCLUDE_DIR:-}
if [ -z "$cutlass" ] && [ -f .deps/cutlass/include/cute/tensor.hpp ]; then
  cutlass=$PWD/.deps/cutlass/include
fi
if [ -z "$cutlass" ]; then
  cutlass=$(python3 -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))' 2>/dev/null || true)
fi
if [ ! -f "$cutlass/cute/tensor.hpp" ]; then
  echo "CUTLASS headers not found: set TILEGRID_CUTLASS_INCLUDE_DIR or carry .deps/cutlass" >&2
  exit 1
fi

# name:fast_exp2:dq_atomic:stages[:stats_early:split_exp[:producer_regs]]
# (stages 0, the switches -1 and producer_regs 0 or left out: the defaults; dq_atomic 0, 1 or 2
# as the config's kDqAtomic). "default" is
# BwdConfig<> (fast exp2); "exp2f" is the same kernel with exp2f; "atomic" adds dQ from
# registers (kDqAtomic 1); "prod24" and "prod40" leave the producer warpgroup 24 or 40 registers
# (the consumers 240 or 232; kProducerRegisters: 24 is the default at head dim 64, 40 at 128 and
# 256); at 256 "atomic" adds dQ from registers, "frag-2st" adds it in fragment order (kDqAtomic
# 2) with two Q/dO stages.
variants_for() {
  if [ -n "${VARIANTS:-}" ]; then echo "$VARIANTS"; return; fi
  if [ "$KIND" = forward ]; then echo "default:1:0:0 prod40:1:0:0:-1:-1:40"; return; fi
  case $1 in
    256) echo "default:1:0:0 atomic:1:1:0 frag-2st:1:2:2" ;;
    128) echo "default:1:0:0 prod24:1:0:0:-1:-1:24 exp2f:0:0:0 atomic:1:1:0" ;;
    *) echo "default:1:0:0 prod40:1:0:0:-1:-1:40 exp2f:0:0:0 atomic:1:1:0" ;;
  esac
}

launcher=""
command -v ccache >/dev/null && launcher=ccache
jobs=${JOBS:-$(nproc)}
[ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
baseline=${BASELINE_TREE:+$(cd "$BASELINE_TREE" && pwd)}
for d in $HEAD_DIMS; do
  for v in $(variants_for "$d"); do
    IFS=: read -r name fast atomic stages early split prod <<<"$v"
    echo "$d $name $fast $atomic $stages $PWD ${early:--1} ${split:--1} ${prod:-0}"
  done
  if [ -n "$baseline" ]; then echo "$d baseline 1 0 0 $baseline -1 -1 0"; fi
done | xargs -P "$jobs" -L 1 sh -c '
  d=$0 name=$1; lib='"$OUT"'/lib/hd$d-$name.so; cd $5
  '"$launcher"' nvcc -std=c++20 --expt-relaxed-constexpr -lineinfo \
    --generate-code=arch=compute_90a,code=[sm_90a] -Xcompiler=-fPIC,-fno-gnu-unique -shared -Xlinker=-Bsymbolic -Xptxas -v \
    -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DTILEGRID_WITH_CUDA \
    -DTG_HEAD_DIM=$d -DTG_FAST_EXP2=$2 -DTG_DQ_ATOMIC=$3 -DTG_STAGES=$4 -DTG_STATS_EARLY=$6 -DTG_SPLIT_EXP=$7 -DTG_PRODUCER_REGS=$8 \
    -Iinclude -Isrc -isystem '"$cutlass"' bench/cuda/attention_'"$KIND"'_variant.cu \
    src/core/cuda_launch.cpp -o $lib \
    >'"$OUT"'/log/hd$d-$name.log 2>&1 || { echo "hd$d $name: build failed"; tail -20 '"$OUT"'/log/hd$d-$name.log; }'
echo "built $(ls "$OUT"/lib/*.so 2>/dev/null | wc -l) variants in $(( $(date +%s) - start )) s"

# The main kernel's line of each log: registers and spills.
for log in "$OUT"/log/*.log; do
  echo "$(basename "$log" .log): $(grep -A3 'Compiling entry.*flash_[bf]wd_sm90_.*kernel' "$log" \
    | grep -E 'spill|Used' | tr -s ' ' | tr '\n' ' ')"
done | tee "$OUT/ptxas.txt"

[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
python3 bench/bench_attention_${KIND}_variants.py "$OUT/lib" --head-dims $HEAD_DIMS \
  --seqlens $SEQLENS --out "$OUT/variants.json"
