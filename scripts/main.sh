#!/usr/bin/env bash
# The README's main job on built-in defaults: set up, build, prepare the synth corpus, train, evaluate.
# Everything lands under runs/main/ (earlier results are kept: a finished run is not retrained).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target aah
AAH=build/release/aah
DATA=data/synth
RUN=runs/main/full
[ -f "$DATA/train.bin" ] || $AAH data synth --out "$DATA" --tokens 4000000
SETS=(--set vocab_size=512 --set train.context=512 --set train.batch_size=8 --set train.steps=400
      --set train.eval_interval=100 --set train.lr=2e-3 --set train.min_lr=2e-4)
if [ -f "$RUN/training_state.safetensors" ]; then
  $AAH train --data "$DATA" --out "$RUN" --resume
else
  $AAH train --data "$DATA" --out "$RUN" "${SETS[@]}"
fi
$AAH eval --run "$RUN" --data "$DATA"
