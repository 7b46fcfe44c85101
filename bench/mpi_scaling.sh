#!/usr/bin/env bash
# Data-parallel scaling of `aah train` on this machine: bench-c (4 layers, hidden 256, 8 heads x 32, vocab 8192,
# global batch 4 x 1024, full windows) as 1 process x 2 threads, 1 process x 1 thread and, with mpirun,
# 2 processes x 1 thread (all-reduce overlapped with the backward, and blocking); prints tokens/s (after the
# first, warm-up, log interval) and the share of the step spent in communication (all-reduce, measured inside aah:
# metrics.jsonl "allreduce_ms").
#
# Measured like every `aah bench` (src/bench/measure.h): the four layouts run interleaved, round after round
# (A B C D A B C D ...), so that a drift of the machine's speed hits them alike; each figure is the median over the
# rounds with its spread (interquartile range / median), and the speed ratio against 1 process x 2 threads is
# taken per round before its median. A figure whose spread is over 10% (or with fewer than 3 rounds) is flagged
# with '!': not a result.
#   bash bench/mpi_scaling.sh [STEPS] [ROUNDS]   (defaults 12 and 5; AAH=path/to/aah to pick a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
AAH=${AAH:-build/release/aah}
STEPS=${1:-12}
ROUNDS=${2:-5}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)
WORK=$(mktemp -d /tmp/aah_mpi_bench_XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$AAH" data synth --out "$WORK/data" --tokens 400000 --vocab 8192 >/dev/null 2>&1
SETS=(--set hidden_size=256 --set intermediate_size=704 --set num_hidden_layers=4 --set num_attention_heads=8
      --set num_key_value_heads=8 --set head_dim=32 --set vocab_size=8192 --set train.context=1024
      --set train.batch_size=4 --set train.steps="$STEPS" --set train.log_interval=2 --set train.eval_interval=0
      --set train.eval_windows=2 --set train.warmup_steps=2)
LAYOUTS=(1x2 1x1 2x1 2x1-blocking)

for ((r = 1; r <= ROUNDS; r++)); do
  for layout in "${LAYOUTS[@]}"; do
    out="$WORK/r$r-$layout"
    case $layout in
      1x2) OMP_NUM_THREADS=2 "$AAH" train --quiet --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
      1x1) OMP_NUM_THREADS=1 "$AAH" train --quiet --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
      2x1) "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$AAH" train --quiet --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
      2x1-blocking) "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$AAH" train --quiet --allreduce blocking \
                      --data "$WORK/data" --out "$out" "${SETS[@]}" ;;
    esac
  done
  echo "[mpi_scaling] round $r/$ROUNDS done" >&2
done

python3 - "$WORK" "$ROUNDS" "${LAYOUTS[@]}" <<'PY'
import json, sys

work, rounds, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tokens_per_step = 4 * 1024  # global batch 4 x context 1024
names = {"1x2": "1 process x 2 threads", "1x1": "1 process x 1 thread", "2x1": "2 processes x 1 thread",
         "2x1-blocking": "2 x 1, blocking all-reduce"}

def run_figures(path):  # tokens/s and all-reduce ms per step, skipping the first (warm-up) log line
    lines = [json.loads(l) for l in open(path) if l.strip()][1:]
    tok = sum(l["tokens_per_s"] for l in lines) / len(lines)
    return tok, sum(l.get("allreduce_ms", 0.0) for l in lines) / len(lines)

def quantile(xs, q):  # linear interpolation, as measure.cpp
    xs = sorted(xs)
    at = q * (len(xs) - 1)
    lo = int(at)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (at - lo)

def stats(xs):
    med = quantile(xs, 0.5)
    spread = (quantile(xs, 0.75) - quantile(xs, 0.25)) / med if med else float("inf")
    return med, spread, "!" if spread > 0.10 or len(xs) < 3 else ""

fig = {l: [run_figures(f"{work}/r{r}-{l}/metrics.jsonl") for r in range(1, rounds + 1)] for l in layouts}
print(f"{rounds} rounds, layouts interleaved; medians (spread = IQR / median; '!' = spread > 10%, not a result)")
print(f"{'layout':28s} {'tokens/s':>10s} {'spread':>7s} {'vs 1x2':>7s} {'spread':>7s} {'ms/step':>8s} "
      f"{'allreduce ms':>12s} {'share':>6s}")
for l in layouts:
    tok = [t for t, _ in fig[l]]
    ratio = [t / b for (t, _), (b, _) in zip(fig[l], fig["1x2"])]  # per round, against 1 process x 2 threads
    share = [a / (tokens_per_step / t * 1000) for t, a in fig[l]]
    (tm, ts, tf), (rm, rs, rf) = stats(tok), stats(ratio)
    ar = quantile([a for _, a in fig[l]], 0.5)
    ratio_text = f"{rm:6.3f}{rf:1s} {100 * rs:6.1f}%" if l != "1x2" else f"{1:6.3f}  {'':>7s}"
    share_text = f"{100 * quantile(share, 0.5):5.1f}%" if ar > 0 else ""
    print(f"{names[l]:28s} {tm:9.0f}{tf:1s} {100 * ts:6.1f}% {ratio_text} {tokens_per_step / tm * 1000:8.0f} "
          f"{f'{ar:.1f}' if ar > 0 else '':>12s} {share_text:>6s}")
PY
