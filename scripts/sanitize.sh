#!/usr/bin/env bash
# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer: builds the asan preset (clang; the
# same tree holds the fuzz targets of scripts/fuzz.sh) and runs ctest on it. Any sanitizer report aborts the test
# that triggered it, so it fails. This build has no MPI (AAH_MPI=OFF): it is also the single-process build check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake --preset asan >/dev/null
cmake --build --preset asan
# OpenBLAS is not instrumented (fine: ASan still checks our side of every call). halt_on_error turns any UBSan
# report into a failure; leaks are reported at exit of each test process.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --preset asan -j "$(nproc)"
