#!/usr/bin/env bash
# bf16 against fp32 on this CPU, side by side (docs/bf16.md has what each CPU measured so far): what to run first on
# a CPU that has not been measured. In order, each a section of OUT:
#   cpu        lscpu's model, family/model, the AVX-512 / AVX-512 BF16 / AMX flags, and `aah info` (what
#              train.precision=bf16 runs here: oneDNN's instruction set, both products' rates, the attention kernel)
#   tests      the bf16 tests (ctest -R 'Bf16|BenchPrecision'): every bf16 kernel this CPU has against the scalar
#              reference with bf16 rounding emulated, the gradient check, resume bit-identical in bf16
#   train      `aah bench train --precision fp32,bf16` (bench-c: tokens/s, per-round step speedup, % of oneDNN's bf16
#              product), --rounds times, each round followed by PyTorch's fp32 step and its bf16 autocast step on the
#              same model (bench/pytorch_baseline.py, Debian python3-torch, 2 threads; skipped where not installed)
#   attention  `aah bench attention --no-dense --precision fp32,bf16` (T = 1024, 4096: D = 32, 64, 128; T = 16384: D = 64)
#   decode     `aah bench decode --context 32768 --precision fp32,bf16` (the KV cache in bf16 against fp32)
#   quality    only when asked (--only ...,quality): the main job's full regime over --seeds in fp32 and in bf16
#              (`aah suite --preset main --regimes full`, the two alternating which runs first per seed, into
#              OUT.quality/fp32 and OUT.quality/bf16), then `aah compare` of the two: validation loss bf16 - fp32 paired
#              by seed, with intervals and the equivalence bound (about 65 s a seed on a Zen 4); choose seeds no
#              earlier sweep used (docs/bf16.md lists them) before any runs
# OUT (default bench-bf16.txt) gets the benches' tables; it is never overwritten. A CPU without bf16 runs the cpu and
# tests sections only (the benches refuse bf16 there). 7 minutes on a Xeon with AMX (2 cores); longer where the
# products are slower. Run nothing else meanwhile.
# For figures to plot, run a bench alone with --json.
#   bash bench/bf16.sh [--out FILE] [--rounds 2] [--budget 40] [--only cpu,tests,train,attention,decode]
#                      [--seeds 500-519]   (the quality section's seeds, FIRST-LAST)
# --budget: seconds per `aah bench train` comparison (its --budget).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench-bf16.txt
rounds=2
budget=40
only="cpu,tests,train,attention,decode"
seeds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "bf16.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bf16.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
for s in ${only//,/ }; do
  [[ " cpu tests train attention decode quality " == *" $s "* ]] ||
    { echo "bf16.sh: --only: unknown section '$s' (cpu, tests, train, attention, decode, quality)" >&2; exit 2; }
done
if [[ ",$only," == *",quality,"* ]]; then
  [[ "$seeds" =~ ^([0-9]+)-([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ] ||
    { echo "bf16.sh: the quality section needs --seeds FIRST-LAST (e.g. 500-519), got '$seeds'" >&2; exit 2; }
  [ -e "$out.quality" ] && { echo "bf16.sh: $out.quality exists; move it away or pass --out" >&2; exit 1; }
fi
aah="${AAH:-build/release/aah}"  # AAH=path: another build's binary
[ -x "$aah" ] || { echo "bf16.sh: $aah not found: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
[ -e "$out" ] && { echo "bf16.sh: $out exists; move it away or pass --out" >&2; exit 1; }
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
info=$("$aah" info 2>/dev/null) || { echo "bf16.sh: $aah info failed" >&2; exit 1; }
bf16=1
grep -q '^bf16 (train.precision=bf16): products on oneDNN' <<< "$info" || bf16=0
tmp="$out.partial"
: > "$tmp"
wants() { [[ ",$only," == *",$1,"* ]]; }
section() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)" | tee -a "$tmp"; }
# One command, echoed, its stdout and stderr into OUT and the terminal; its failure is written down, not fatal.
run() {
  echo "\$ $*" | tee -a "$tmp"
  "$@" 2>&1 | tee -a "$tmp" || echo "(exit status ${PIPESTATUS[0]})" | tee -a "$tmp"
}

if wants cpu; then
  section cpu
  { lscpu | grep -m1 'Model name'
    grep -m1 'cpu family' /proc/cpuinfo; grep -m1 '^model[[:space:]]' /proc/cpuinfo
    echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    git log -1 --format='checkout at %h (%cd)' 2>/dev/null || true; } | tee -a "$tmp"
  run "$aah" info
fi
if wants tests; then
  section tests
  run ctest --test-dir build/release -R 'Bf16|BenchPrecision' -j2 --output-on-failure
fi
if [ "$bf16" = 0 ]; then
  echo "bf16.sh: this CPU has no bf16 matrix instructions (see aah info): no bf16 benches" | tee -a "$tmp"
else
  if wants train; then
    section train
    torch=1
    /usr/bin/python3 -c "import torch" 2>/dev/null ||
      { torch=0; echo "(no PyTorch: apt-get install python3-torch for its steps beside aah's)" | tee -a "$tmp"; }
    # PyTorch's fp32 products run on the same OpenBLAS: give it the core aah runs (as bench/long_context.sh does).
    blas_core=$(sed -n 's/^openblas core: \([A-Za-z0-9]*\).*/\1/p' <<< "$info")
    for r in $(seq "$rounds"); do
      run "$aah" bench train --precision fp32,bf16 --budget "$budget"
      if [ "$torch" = 1 ]; then
        # which precision runs first alternates by round
        if [ $((r % 2)) = 1 ]; then precisions="fp32 bf16"; else precisions="bf16 fp32"; fi
        for p in $precisions; do
          run env OPENBLAS_CORETYPE="$blas_core" /usr/bin/python3 bench/pytorch_baseline.py --precision "$p" --steps 8
        done
      fi
    done
  fi
  if wants attention; then
    section attention
    run "$aah" bench attention --no-dense --precision fp32,bf16 --budget 20
  fi
  if wants decode; then
    section decode
    run "$aah" bench decode --context 32768 --precision fp32,bf16 --budget 30
  fi
  if wants quality; then
    section quality
    q="$out.quality"
    mkdir -p "$q"
    for s in $(seq "${seeds%-*}" "${seeds#*-}"); do
      if [ $((s % 2)) = 0 ]; then precisions="fp32 bf16"; else precisions="bf16 fp32"; fi
      for p in $precisions; do
        echo "seed $s $p ($(date +%H:%M:%S))" | tee -a "$tmp"
        # each suite prepares the preset's corpus into its own data/ once (a suite refuses another --data later)
        "$aah" suite --preset main --regimes full --seeds "$s" --timing-budget 0 --no-report --out "$q/$p" \
          --set train.precision="$p" > "$q/log-$p-$s.txt" 2>&1 ||
          { echo "(seed $s $p failed: $q/log-$p-$s.txt)" | tee -a "$tmp"; }
      done
    done
    run "$aah" compare "$q/fp32" "$q/bf16"
    "$aah" compare "$q/fp32" "$q/bf16" --json > "$q/compare.json" 2>/dev/null || true
  fi
fi
mv "$tmp" "$out"
echo "bf16.sh: wrote $out" >&2
