// `aah train`: the training loop, checkpoints and resume.
//
// A run directory (Hugging Face layout):
//   config.json                 Qwen3 fields + "train" + "aah" blocks (what was run)
//   model.safetensors           weights at the last checkpoint, HF tensor names
//   training_state.safetensors  AdamW moments, step, RNG, tokens seen (to resume bit-identically)
//   controller_state.safetensors  the AAH controller per layer (scorers, EMAs, topology, windows) + diagnostics
//   metrics.jsonl               one JSON object per log interval
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace aah {

struct TrainOptions {
  std::string data_dir;  // holds train.bin and val.bin
  std::string out_dir;   // run directory
  Config config;         // ignored with resume (the run's config.json is used, then `sets` on top)
  std::vector<std::string> sets;
  bool resume = false;
  bool force = false;  // overwrite an existing run directory
  bool quiet = false;  // no progress lines
  std::string trace_file;  // --trace-controller: one JSON line per layer per control update
  int stop_after = 0;  // > 0: checkpoint and stop after this many steps, as if interrupted (tests resume)
};

// Returns the process exit code (0 ok).
int train_run(const TrainOptions& opt);

}  // namespace aah
