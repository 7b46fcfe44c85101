#!/usr/bin/env bash
# Where a small window's extra time per visible pair goes, against full windows, part by part (docs/results-attention.md, "Where the
# T = 1024 cost goes"). Compiles the attention kernel twice (namespaces aahx and aahy) into driver.cpp, runs window
# W through one copy and full windows through the other in alternating rounds under `perf record`, and splits the
# samples by copy and by part: score products (with their softmax epilogues), output products (PV; dV, dK, dQ),
# the softmax pass, the transposes, Delta, log. Each part's time per pair is its share of the samples over the
# pairs that side ran; "excess" is the difference in percent of full's time per pair, so the excesses add up to
# t/p - 1.
#   bash bench/attention_excess/run.sh [--context 1024] [--head-dim 32] [--window 128] [--rounds 40] [--threads 1]
#                                      [--march native]   (e.g. --march haswell: the AVX2 kernels on any AVX2 CPU)
# Needs `perf` (Debian: linux-perf) and g++. About 20 s for the defaults; builds into build/attention_excess/.
# Parts are symbols, so they follow the compiler's inlining: what it inlines into the forward's task is counted
# there ("forward task, inlined parts": the PV product with AVX-512; with AVX2 also the softmax and the interior
# tiles' score products). Compare the forward's parts between runs of one build; the backward's are separate in both.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # the help reads it after the cd
cd "$(dirname "$0")/../.."
T=1024 D=32 W=128 rounds=40 threads=1 march=native
help_end=14
source bench/attention_excess/options.sh
command -v perf > /dev/null || { echo "run.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
dir=build/attention_excess
mkdir -p "$dir"
flags="-O3 -DNDEBUG -march=$march -fopenmp -std=gnu++20 -Isrc"
for ns in aahx aahy; do c++ $flags -Daah=$ns -c src/kernels/cpu/attention.cpp -o "$dir/attention_$ns.o"; done
c++ $flags bench/attention_excess/driver.cpp "$dir/attention_aahx.o" "$dir/attention_aahy.o" -o "$dir/driver"
for pass in f b; do
  OMP_NUM_THREADS=$threads perf record -q -o "$dir/perf_$pass.data" "$dir/driver" "$T" "$D" "$W" "$rounds" "$pass" \
    > "$dir/driver_$pass.txt"
  head -1 "$dir/driver_$pass.txt"
  perf report -i "$dir/perf_$pass.data" --no-children --sort sym --stdio 2> /dev/null |
    python3 bench/attention_excess/parts.py "$(tail -1 "$dir/driver_$pass.txt")" "$T" "$W" "$pass"
done
