#!/bin/bash
# How aah's thread count follows the load (issue 39), measured side by side. aah measures at start how many cores
# are free (two 20 ms spins) and, in training, again every 30 s (thread_count_recheck). Three machines states, each
# with alternating runs of the same short training:
#   idle       no other process:                     auto (start check + recheck)  vs  OMP_NUM_THREADS=2 (no checks)
#   transient  a spinner only for the first 3 s:     auto  vs  OMP_NUM_THREADS=1 (what a start-only check keeps)
#                                                    vs  OMP_NUM_THREADS=2
#   busy       one spinner beside aah all the time:  auto  vs  OMP_NUM_THREADS=2
# Prints each run's wall seconds, the thread-count lines aah wrote, and per-round ratios to auto. The model is the
# smoke preset's (tiny: where an oversized team costs most). Needs 2 cores or more; nothing else running.
# Usage: bash bench/thread_load.sh [AAH_BINARY] [ROUNDS] [STATES]   (~15 minutes on 2 cores: 2 rounds of
#        "idle transient busy")
set -euo pipefail
AAH=${1:-build/release/aah}
ROUNDS=${2:-2}
STATES=${3:-idle transient busy}
[ -x "$AAH" ] || { echo "thread_load.sh: $AAH: no such executable (build first)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/aah_thread_load.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$AAH" data synth --out "$WORK/data" --tokens 200000 >/dev/null
ARGS=()
for s in vocab_size=512 hidden_size=64 intermediate_size=128 num_hidden_layers=2 num_attention_heads=8 \
         num_key_value_heads=4 head_dim=8 train.context=128 train.batch_size=4 train.lr=3e-3 train.min_lr=3e-4 \
         train.warmup_steps=10 train.log_interval=1000 train.eval_interval=1000000; do
  ARGS+=(--set "$s")
done

spin() { timeout "$1" sh -c 'while :; do :; done' || true; }

# one run: prints "seconds lines" (lines: aah's thread-count messages, joined)
run() {  # run NAME THREADS(auto|1|2) STEPS LOAD(none|transient|busy)
  local name=$1 threads=$2 steps=$3 load=$4 spinner=
  case $load in
    transient) spin 3 & spinner=$!; sleep 0.5 ;;
    busy) spin 100000 & spinner=$!; sleep 0.5 ;;
  esac
  local env=()
  [ "$threads" != auto ] && env=(OMP_NUM_THREADS="$threads")
  local t0 t1
  t0=$(date +%s.%N)
  env "${env[@]}" "$AAH" train --data "$WORK/data" --out "$WORK/run" --force --quiet "${ARGS[@]}" \
      --set train.steps="$steps" 2>"$WORK/err" >/dev/null
  t1=$(date +%s.%N)
  [ -n "$spinner" ] && { pkill -P "$spinner" 2>/dev/null || true; kill "$spinner" 2>/dev/null || true; wait "$spinner" 2>/dev/null || true; }
  local msg
  msg=$(grep -o '[0-9] of [0-9] cores free[^:]*: [0-9] OpenMP thread' "$WORK/err" | tr '\n' ';' || true)
  printf '%-10s %-5s round %d: %7.2f s  %s\n' "$state" "$threads" "$r" "$(echo "$t1 - $t0" | bc)" "${msg:-(no change)}"
  echo "$t1 - $t0" | bc >"$WORK/last"
}

echo "aah thread_load: $("$AAH" info 2>/dev/null | grep -m1 -i cpu || lscpu | grep -m1 'Model name'), $(nproc) CPUs, $ROUNDS rounds"
declare -A T
for state in $STATES; do
  case $state in
    idle) steps=20000; variants="auto 2"; mode=none ;;
    transient) steps=20000; variants="auto 1 2"; mode=transient ;;
    busy) steps=4000; variants="auto 2"; mode=busy ;;
  esac
  for r in $(seq 1 "$ROUNDS"); do
    for v in $variants; do
      run "$state" "$v" "$steps" "$mode"
      T[$state,$v,$r]=$(cat "$WORK/last")
    done
  done
  for v in $variants; do
    [ "$v" = auto ] && continue
    ratios=""
    for r in $(seq 1 "$ROUNDS"); do ratios="$ratios $(echo "scale=3; ${T[$state,$v,$r]} / ${T[$state,auto,$r]}" | bc)"; done
    echo "  $state: time with OMP_NUM_THREADS=$v / time auto, per round:$ratios"
  done
done
