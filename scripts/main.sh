#!/usr/bin/env bash
# The README's main job on built-in defaults: set up, build, then the cpu-small suite: the Brown corpus, the five
# main regimes trained side by side (~15 minutes on 2 cores), each evaluated, the tables printed and the report
# written to runs/cpu-small/report.{md,html}. Rerun it after an interruption: finished runs are skipped, an
# interrupted one resumes from its checkpoint; earlier results are never overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target aah
build/release/aah suite --preset cpu-small --out runs/cpu-small "$@"
echo "[main] report: runs/cpu-small/report.html (figures in runs/cpu-small/figures/, numbers in runs.csv, summary.csv)"
