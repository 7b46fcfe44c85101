#!/usr/bin/env bash
# Re-derives tests/golden/values.json, the cross-machine check of the golden test, from the arithmetics this machine
# can run: the release build with each OpenBLAS core the CPU runs (SkylakeX, Cooperlake: AVX-512; Haswell, Zen),
# the zen3 preset (AVX2 code), the portable preset (no SIMD flags) and a release build with 256-bit vectors
# (AAH_VECTOR_WIDTH=256: the summation order of an Intel tuning). Run it after a change that moves the numbers on
# purpose (then record the digests too: AAH_GOLDEN_RECORD=1). Takes about 15 minutes on 2 cores. Needs python3.
#   bash scripts/golden_values.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cmake --preset release >/dev/null && cmake --build --preset release >/dev/null
cmake --preset zen3 >/dev/null && cmake --build --preset zen3 >/dev/null
cmake --preset portable >/dev/null && cmake --build --preset portable --target aah aah_tests >/dev/null
cmake -S . -B build/width256 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG" \
  -DAAH_VECTOR_WIDTH=256 -DAAH_MPI=OFF >/dev/null
cmake --build build/width256 --target aah aah_golden_tests >/dev/null
files=()
values() {  # values LABEL CORE BINARY
  OPENBLAS_CORETYPE="$2" AAH_GOLDEN_VALUES_OUT="$out/$1.json" "$3" --gtest_filter='Golden.OutputsAre*' >/dev/null || true
  [ -f "$out/$1.json" ] && files+=("$out/$1.json") && echo "[golden_values] $1"
}
if grep -qw avx512f /proc/cpuinfo; then
  values native-SkylakeX SkylakeX build/release/aah_tests
  values native-Cooperlake Cooperlake build/release/aah_tests
  values width256-SkylakeX SkylakeX build/width256/aah_golden_tests
fi
values native-Haswell Haswell build/release/aah_tests
values native-Zen Zen build/release/aah_tests
values zen3-Zen Zen build/zen3/aah_golden_tests
values portable-Haswell Haswell build/portable/aah_tests
python3 scripts/golden_values.py tests/golden/values.json "${files[@]}"
