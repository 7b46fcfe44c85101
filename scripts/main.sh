#!/usr/bin/env bash
# The README's main job on built-in defaults: set up, build, then the `main` suite: the Brown corpus at context 2048
# (attention about half of a full-window step), the five main regimes plus two matched-cost baselines (a fixed
# window at full_adaptive's pair ratio, and the need-aware `coverage` policy), 3 seeds each (~30 minutes on 2
# cores), each evaluated, the final window maps timed side by side, the tables printed and the report written to
# runs/main/report.{md,html}. Rerun it after an interruption: finished runs are skipped, an interrupted one resumes
# from its checkpoint; earlier results are never overwritten. The earlier main job is `--preset cpu-small`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target aah
build/release/aah suite --preset main --out runs/main "$@"
echo "[main] report: runs/main/report.html (figures in runs/main/figures/, numbers in runs.csv, summary.csv, timing.json)"
