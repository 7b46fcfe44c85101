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
  // Data-parallel runs (mpirun -np N): all-reduce gradient buckets while backward runs ("overlap") or all at once
  // after it ("blocking"). The same numbers either way.
  std::string allreduce = "overlap";
};

// Under mpirun -np N (a build with MPI) the N processes train one model data-parallel: every rank draws the whole
// batch from the shared RNG stream and runs its slice of batch_size / N sequences; gradients (and the controller's
// features) are combined over the ranks, so the run equals one process with the same batch_size, and a checkpoint
// resumes under any N that divides batch_size. Rank 0 writes the run directory; the others stay quiet.
// Returns the process exit code (0 ok).
int train_run(const TrainOptions& opt);

}  // namespace aah
