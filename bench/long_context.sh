#!/usr/bin/env bash
# Long-context training, side by side (issue 16): for each context T, `aah bench train --context T --windows
# mix,T/8` (full windows, the paper's final Full-adaptive mix and T/8, interleaved in one process; 4096 tokens
# per step, so batch 1 from T = 4096 on), then PyTorch on the same model with full causal attention and with the
# paper's dense-masked per-head windows (bench/pytorch_baseline.py; only where it fits in --max-gb).
# Every figure is a JSON line in OUT (default bench-long.jsonl); a table is printed at the end. The peak RSS of each
# aah process is its own (one process per context), so the RSS column shows how memory grows with T.
#   bash bench/long_context.sh [--contexts "4096 8192 16384 32768"] [--torch-contexts "4096 8192 16384"]
#                              [--out FILE] [--max-gb 20] [--rounds 5] [--budget 60]
# aah: --rounds timed rounds per context at least (after one warm-up round), more while a spread is over 10% and
# the rounds fit in --budget seconds (so short contexts repeat until they hold still; 32K stops at --rounds).
# About 35 minutes on 2 cores (AVX2) for the defaults, most of it T = 32768 (a full-window step there is ~65 s),
# 20 on an AVX-512 Xeon.
set -euo pipefail
cd "$(dirname "$0")/.."
contexts="4096 8192 16384 32768"
torch_contexts="4096 8192 16384"
out=bench-long.jsonl
max_gb=20
rounds=5
budget=60
while [ $# -gt 0 ]; do
  case "$1" in
    --contexts) contexts="$2"; shift 2 ;;
    --torch-contexts) torch_contexts="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --max-gb) max_gb="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "long_context.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
aah=build/release/aah
[ -x "$aah" ] || { echo "long_context.sh: $aah not found: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
torch_python=/usr/bin/python3
have_torch=1
"$torch_python" -c "import torch" 2>/dev/null || { have_torch=0; echo "long_context.sh: no PyTorch (apt-get install python3-torch): aah only" >&2; }
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
# PyTorch's matrix products run on the same OpenBLAS: give it the core aah runs (aah forces one where OpenBLAS
# misreads the CPU; see README and docs/building.md, "OpenBLAS on CPUs newer than it").
blas_core=$("$aah" info | sed -n 's/^openblas core: \([A-Za-z0-9]*\).*/\1/p')
[ -e "$out" ] && { echo "long_context.sh: $out exists; move it away or pass --out" >&2; exit 1; }
tmp="$out.partial"
: > "$tmp"
for T in $contexts; do
  echo "[long] aah bench train --context $T --windows mix,T/8 ($(date +%H:%M:%S))" >&2
  "$aah" bench train --context "$T" --windows mix,T/8 --rounds-min "$rounds" --budget "$budget" --json \
    | sed "s/^{/{\"engine\":\"aah\",/" >> "$tmp"
  if [ "$have_torch" = 1 ] && [[ " $torch_contexts " == *" $T "* ]]; then
    for w in full mix; do
      echo "[long] pytorch --context $T --windows $w ($(date +%H:%M:%S))" >&2
      OPENBLAS_CORETYPE="$blas_core" LD_PRELOAD="$tcmalloc" "$torch_python" bench/pytorch_baseline.py --context "$T" --windows "$w" --steps 3 \
        --max-gb "$max_gb" --json | sed "s/^{/{\"engine\":\"pytorch\",/" >> "$tmp"
    done
  fi
done
mv "$tmp" "$out"
"$torch_python" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'T':>6} {'engine':8} {'windows':13} {'ms/step':>10} {'tokens/s':>9} {'ratio':>7} {'predicted':>9} "
      f"{'meas/pred':>9} {'peak RSS MB':>11}")
for r in rows:
    T = r["context"]
    if r["engine"] == "aah":
        pred = r.get("expected_ms_per_step")
        flag = "!" if r.get("flagged") else ""
        ratio = r.get("time_ratio", 1.0)
        vs = r.get("time_vs_expected")
        print(f"{T:>6} {'aah':8} {r['regime']:13} {r['ms_per_step']:>9.0f}{flag} {r['tokens_per_s']:>9.0f} "
              f"{ratio:>7.3f} {(f'{pred:.0f}' if pred else ''):>9} {(f'{vs:.3f}' if vs else ''):>9} "
              f"{r['peak_rss_mb']:>11.0f}")
    elif r["fits"]:
        print(f"{T:>6} {'pytorch':8} {r['windows']:13} {r['ms_per_step']:>10.0f} {r['tokens_per_s']:>9.0f} "
              f"{'':>7} {'':>9} {'':>9} {r['peak_rss_mb']:>11.0f}")
    else:
        print(f"{T:>6} {'pytorch':8} {r['windows']:13} does not fit in {r['max_gb']} GB ({r['error'][:60]}...), "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
aah = {(r["context"], r["regime"]): r for r in rows if r["engine"] == "aah"}
for r in rows:
    if r["engine"] == "pytorch" and r["fits"]:
        a = aah.get((r["context"], "adaptive mix" if r["windows"] == "mix" else "full"))
        if a:
            print(f"T={r['context']} {r['windows']}: aah {r['ms_per_step'] / a['ms_per_step']:.2f}x PyTorch's speed")
PY
