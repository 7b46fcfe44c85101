#!/usr/bin/env bash
# The portable build (preset `portable`: AAH_NATIVE=OFF, no -march=native, so every kernel takes its scalar path,
# as on a CPU without AVX2/FMA) and its test suite, less the two long-context attention tests that take minutes on
# the scalar path. .ci/run runs it after the release suite: without it the scalar paths go untested on machines
# that have AVX2. Then the scalar arithmetic against its golden digests (tests/golden/generic-gcc12-openblas-Haswell
# .json) with OpenBLAS's Haswell kernels, which any CPU with AVX2 and FMA runs: a change that moves the scalar
# path's bits fails CI whichever CPU CI runs on.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake --preset portable >/dev/null
cmake --build --preset portable
ctest --preset portable -j "$(nproc)"
for flag in avx2 fma; do
  if ! grep -qw "$flag" /proc/cpuinfo; then
    echo "[portable] golden digests skipped: this CPU lacks $flag, which OpenBLAS's Haswell kernels need"
    exit 0
  fi
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
OPENBLAS_CORETYPE=Haswell build/portable/aah_tests --gtest_filter='Golden.*' | tee "$log"
if grep -q '^\[  SKIPPED \]' "$log"; then  # no digests for the key this build computed: nothing was checked
  echo "[portable] the golden test skipped: expected tests/golden/generic-gcc12-openblas-Haswell.json to be used" >&2
  exit 1
fi
