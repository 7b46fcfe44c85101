#!/usr/bin/env bash
# The Intel Xeon's golden digests (tests/golden/avx512-gcc12-openblas-SkylakeX.json) on any x86-64 machine with
# AVX-512: the release build (-march=native) with OPENBLAS_CORETYPE=SkylakeX. Since CMakeLists.txt makes GCC fuse
# multiply-add chains whatever the tuning, a native build's bits depend on the instruction set and not on the
# vendor: measured 2026-12-02 on an AMD EPYC family 26 (AVX-512), which reproduced every Intel digest this way.
# .ci/run checks them like this after scripts/test.sh has built the release preset; a CPU without AVX-512 skips.
#   bash scripts/golden_avx512.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/golden_lib.sh
golden_need golden_avx512 "which the AVX-512 digests need (an AVX-512 build)" avx512f avx512bw avx512vl avx512dq avx512cd
[ -x build/release/aah_tests ] || { echo "[golden_avx512] build/release/aah_tests not found: run scripts/test.sh first" >&2; exit 1; }
golden_check golden_avx512 SkylakeX build/release/aah_tests avx512-gcc12-openblas-SkylakeX
