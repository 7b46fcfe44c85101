#!/usr/bin/env bash
# The portable build (preset `portable`: AAH_NATIVE=OFF, no -march=native, so every kernel takes its scalar path,
# as on a CPU without AVX2/FMA) and its test suite, less the two long-context attention tests that take minutes on
# the scalar path. .ci/run runs it after the release suite: without it the scalar paths go untested on machines
# that have AVX2.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake --preset portable >/dev/null
cmake --build --preset portable
ctest --preset portable -j "$(nproc)"
