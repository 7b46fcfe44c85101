// `aah train`: the training loop, checkpoints and resume.
//
// A run directory (Hugging Face layout at the top level):
//   config.json                 Qwen3 fields + "train" + "aah" blocks (what was run)
//   model.safetensors           weights at the last checkpoint, HF tensor names
//   training_state.safetensors  AdamW moments, step, RNG, tokens seen, loss EMA (to resume bit-identically)
//   controller_state.safetensors  the AAH controller per layer (scorers, EMAs, topology, windows) + diagnostics
//   tokenizer.json              the data's tokenizer, when it has one
//   data.json                   where the data is, its vocabulary and tokenizer SHA-256 (run_data.h): --resume
//                               without --data uses it; a given --data must have the same vocabulary and tokenizer
//   metrics.jsonl               one JSON object per log interval, and events (nonfinite, loss_spike)
//
// The four checkpoint files are links into RUN/checkpoint -> ckpt-<step>/, which is switched with one rename(2):
// a run always has its old complete checkpoint or its new one, never a mix, whenever it is killed (checkpoint.h).
// Every safetensors file carries a CRC-32C of its data, verified on load; non-finite weights or moments are never
// written; a failed write (full disk) stops training with an error naming the file, the previous checkpoint intact.
// SIGINT / SIGTERM checkpoint and stop (exit code 128 + signal); a resumed run continues bit-identically.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace aah {

struct TrainOptions {
  std::string data_dir;  // holds train.bin and val.bin; may be empty with resume (the run's data.json says where)
  std::string out_dir;   // run directory
  Config config;         // ignored with resume (the run's config.json is used, then `sets` on top)
  std::vector<std::string> sets;
  // A new run's vocab_size starts as the data's vocabulary (its tokenizer's, see run_data.h), then `sets` apply:
  // `aah train` sets this unless --config gives vocab_size.
  bool vocab_from_data = false;
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

// Loads and verifies RUN's checkpoint as --resume does (config, weights, optimizer and controller state, data
// checksums, all from the same step) and returns its step; -1 when the run has no checkpoint yet. Errors name the
// file and the problem.
int checkpoint_verify(const std::string& run);

}  // namespace aah
