#!/usr/bin/env bash
# The README's test command: install what is missing, build the release preset, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release -j "$(nproc)"
