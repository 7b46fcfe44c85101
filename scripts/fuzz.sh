#!/usr/bin/env bash
# Fuzzes every reader: builds the fuzz preset (clang, libFuzzer, ASan + UBSan), runs each target of fuzz/ for
# SECONDS (default 30) from its seed corpus in a temporary directory: valid inputs written by make_seeds with
# aah's own writers, plus the committed fuzz/corpus/<target>/ files (reduced inputs of crashes found, hand-made
# cases; they stay as they are). Prints per target the executions and the outcome. Exits non-zero if any target crashed; the input
# that crashed it is kept under build/asan/fuzz/crashes/<target>/ (reproduce: build/asan/<target> FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
bash scripts/setup.sh >/dev/null
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

targets=(fuzz_safetensors fuzz_shard fuzz_tokenizer fuzz_config fuzz_weights_index fuzz_controller_state fuzz_report)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

bin=build/asan  # the fuzz preset builds in the asan tree (same flags; the fuzz targets are extra targets)
out="$bin/fuzz"
"$bin/make_seeds" "$work"
failed=0
printf '%-24s %12s %10s  %s\n' target executions exec/s outcome
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  [ -d "fuzz/corpus/$t" ] && cp fuzz/corpus/"$t"/* "$work/$t/"
  crashes="$out/crashes/$t"
  mkdir -p "$crashes"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  log="$out/$t.log"
  # -timeout: one input taking longer is a bug (a hang); -rss_limit_mb also caps single allocations (a size read
  # from the input must be checked against the input before it is allocated).
  set +e
  "$bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "${dict[@]}" "$work/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs="$(awk '/stat::number_of_executed_units/ {print $2}' "$log")"
  rate="$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")"
  if [ "$rc" -eq 0 ]; then
    outcome="ok ($(ls "$work/$t" | wc -l) corpus inputs)"
  else
    failed=1
    outcome="CRASH (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|runtime error|uncaught|deadly|fuzz property' "$log" || true)"
    outcome="$outcome; input: $(ls -t "$crashes" | head -1 | sed "s|^|$crashes/|"); log: $log"
  fi
  printf '%-24s %12s %10s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$outcome"
done
exit "$failed"
