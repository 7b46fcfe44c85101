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
source scripts/golden_lib.sh
golden_need portable "which OpenBLAS's Haswell kernels (the golden digests) need" avx2 fma
golden_check portable Haswell build/portable/aah_tests generic-gcc12-openblas-Haswell
