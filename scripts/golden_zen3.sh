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
source scripts/golden_lib.sh
golden_need golden_zen3 "which -march=znver3 code needs" avx2 fma bmi2
bash scripts/setup.sh >/dev/null
cmake --preset zen3 >/dev/null
cmake --build --preset zen3
golden_check golden_zen3 Zen build/zen3/aah_golden_tests avx2-gcc12-openblas-Zen
