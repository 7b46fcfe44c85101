#!/usr/bin/env bash
# The AMD EPYC's golden digests (tests/golden/avx2-gcc12-openblas-Zen.json) on any x86-64 machine with AVX2:
# preset `zen3` compiles for -march=znver3 (the AMD development machine's -march=native arithmetic) and
# OPENBLAS_CORETYPE=Zen runs OpenBLAS's Zen kernels. Measured 2026-12-01 on the Intel Xeon (model 207): this
# reproduced every recorded AMD digest, while -march=haswell reproduced none. .ci/run checks them this way, so the
# AVX2 arithmetic is held to its digests whichever CPU CI runs on.
#   bash scripts/golden_zen3.sh           check the digests
#   bash scripts/golden_zen3.sh record    record them again (from a known-good commit, after a deliberate change)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-check}" in
  check) ;;
  record) export AAH_GOLDEN_RECORD=1 ;;
  *) echo "usage: bash scripts/golden_zen3.sh [check|record]" >&2; exit 2 ;;
esac
for flag in avx2 fma bmi2; do
  if ! grep -qw "$flag" /proc/cpuinfo; then
    echo "[golden_zen3] skipped: this CPU lacks $flag, which -march=znver3 code needs"
    exit 0
  fi
done
bash scripts/setup.sh >/dev/null
cmake --preset zen3 >/dev/null
cmake --build --preset zen3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
OPENBLAS_CORETYPE=Zen build/zen3/aah_golden_tests | tee "$log"
if grep -q '^\[  SKIPPED \]' "$log"; then  # no digests for the key this build computed: nothing was checked
  echo "[golden_zen3] the golden test skipped: expected tests/golden/avx2-gcc12-openblas-Zen.json to be used" >&2
  exit 1
fi
