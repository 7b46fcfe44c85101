#!/usr/bin/env bash
# Two versions of the attention kernel side by side, on the same windows: the kernel of git revision REV (its
# src/kernels and src/core) against the working tree's, both compiled into bench/attention_excess/driver.cpp (in
# namespaces aahx and aahy) and run in alternating rounds in one process, so that both see the same machine state.
# Prints, per pass, REV's time per pair over the working tree's (above 1: the working tree is faster), the median of
# --rounds per-round ratios. --window takes one window for all 8 heads or 8 comma-separated ones, e.g. the paper's
# mix at T = 4096: 512,512,512,512,1024,1024,2048,4096 (unequal windows run the backward's per-tile schedule).
#   bash bench/attention_excess/compare.sh REV [--context 4096] [--head-dim 32] [--window 512] [--rounds 20]
#                                              [--threads 2] [--march native]
# Needs git and g++; about 30 s. Builds into build/attention_compare/. The two kernels must have the same entry
# points (kernels/ops.h's attn_local_forward and attn_local_backward).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # the help reads it after the cd
cd "$(dirname "$0")/../.."
case "${1:-}" in
  -h|--help) sed -n '2,11p' "$self"; exit 0 ;;
  ""|-*) sed -n '2,11p' "$self" >&2; exit 2 ;;
esac
rev="$1"; shift
T=4096 D=32 W=512 rounds=20 threads=2 march=native
help_end=11
source bench/attention_excess/options.sh
git rev-parse --verify --quiet "$rev^{commit}" > /dev/null || { echo "compare.sh: no such revision: $rev" >&2; exit 2; }
dir=build/attention_compare
rm -rf "$dir/old" && mkdir -p "$dir/old"
git archive "$rev" src/kernels src/core | tar -x -C "$dir/old"
flags="-O3 -DNDEBUG -march=$march -fopenmp -std=gnu++20"
c++ $flags -I"$dir/old/src" -Daah=aahx -c "$dir/old/src/kernels/cpu/attention.cpp" -o "$dir/attention_old.o"
c++ $flags -Isrc -Daah=aahy -c src/kernels/cpu/attention.cpp -o "$dir/attention_new.o"
c++ $flags bench/attention_excess/driver.cpp "$dir/attention_old.o" "$dir/attention_new.o" -o "$dir/driver"
echo "attention kernel at $rev over the working tree's, time per pair, T=$T D=$D W=$W, $threads thread(s):"
for pass in f b; do
  r=$(OMP_NUM_THREADS=$threads "$dir/driver" "$T" "$D" "$W" "$rounds" "$pass" "$W" | head -1 | awk '{print $NF}')
  echo "  $([ $pass = f ] && echo forward || echo backward)  $r"
done
