#!/usr/bin/env bash
# Data-parallel scaling of `aah train` on this machine: bench-c (4 layers, hidden 256, 8 heads x 32, vocab 8192,
# global batch 4 x 1024, full windows) as 1 process x 2 threads, 1 process x 1 thread and, with mpirun,
# 2 processes x 1 thread; prints tokens/s (after the first, warm-up, log interval) and the share of the step spent
# in communication (all-reduce, measured inside aah: metrics.jsonl "allreduce_ms").
#   bash bench/mpi_scaling.sh [STEPS]        (default 12; AAH=path/to/aah to pick a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
AAH=${AAH:-build/release/aah}
STEPS=${1:-12}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)
WORK=$(mktemp -d /tmp/aah_mpi_bench_XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$AAH" data synth --out "$WORK/data" --tokens 400000 --vocab 8192 >/dev/null 2>&1
SETS=(--set hidden_size=256 --set intermediate_size=704 --set num_hidden_layers=4 --set num_attention_heads=8
      --set num_key_value_heads=8 --set head_dim=32 --set vocab_size=8192 --set train.context=1024
      --set train.batch_size=4 --set train.steps="$STEPS" --set train.log_interval=2 --set train.eval_interval=0
      --set train.eval_windows=2 --set train.warmup_steps=2)

summary() {  # metrics.jsonl -> "tokens/s  ms/step  allreduce ms/step  share", skipping the first (warm-up) line
  python3 - "$1" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]
tok = sum(l["tokens_per_s"] for l in lines) / len(lines)
ar = sum(l.get("allreduce_ms", 0.0) for l in lines) / len(lines)
ms = 4 * 1024 / tok * 1000
print(f"{tok:10.0f} {ms:10.0f} {ar:12.1f} {100 * ar / ms:8.2f}%")
PY
}

printf "%-28s %10s %10s %12s %9s\n" "layout" "tokens/s" "ms/step" "allreduce ms" "share"
for layout in "1x2" "1x1" "2x1" "2x1-blocking"; do
  out="$WORK/run-$layout"
  case $layout in
    1x2) OMP_NUM_THREADS=2 "$AAH" train --quiet --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
    1x1) OMP_NUM_THREADS=1 "$AAH" train --quiet --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
    2x1) "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$AAH" train --quiet --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
    2x1-blocking) "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$AAH" train --quiet --allreduce blocking \
                    --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
  esac
  case $layout in
    1x2) name="1 process x 2 threads" ;; 1x1) name="1 process x 1 thread" ;;
    2x1) name="2 processes x 1 thread" ;; 2x1-blocking) name="2 x 1, blocking all-reduce" ;;
  esac
  printf "%-28s %s\n" "$name" "$(summary "$out/metrics.jsonl")"
done
