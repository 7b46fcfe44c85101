// Checkpoints as one unit. A run directory keeps its checkpoint in a directory named by the step, and a symlink
// that says which one is current:
//
//   RUN/checkpoint -> ckpt-40      the commit point, replaced with one rename(2)
//   RUN/ckpt-40/                   config.json, model.safetensors, training_state.safetensors,
//                                  controller_state.safetensors (each with a CRC-32C of its data, see safetensors.h)
//   RUN/model.safetensors -> checkpoint/model.safetensors, and the same for the other three files: the Hugging
//                                  Face layout that `aah eval`, `aah generate` and other tools read
//
// Writing step N: the files go into RUN/ckpt-N.tmp.<pid> (each fsynced, then the directory), which is renamed to
// RUN/ckpt-N (RUN fsynced); then a new link ckpt-N is renamed over RUN/checkpoint (RUN fsynced) and the previous
// ckpt-M is removed. At every instant RUN/checkpoint names a complete checkpoint, the old one or the new one,
// never a mix. What a killed writer leaves behind (a temp directory, an uncommitted ckpt-N, the superseded ckpt-M,
// *.tmp.<pid> files) is removed by checkpoint_clean at the next start.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace aah {

// The files of a checkpoint.
inline constexpr const char* kCheckpointFiles[] = {"config.json", "model.safetensors", "training_state.safetensors",
                                                   "controller_state.safetensors"};

// The directory holding RUN's current checkpoint: RUN/ckpt-N; RUN itself for a run written before checkpoints were
// directories (the files at the top level); "" when there is none yet.
std::string checkpoint_dir(const std::string& run);

// Writes the checkpoint of `step`: `write(dir)` puts the files into the new, empty directory `dir`, then the swap
// above. On an error RUN's previous checkpoint stays current and the temp directory is removed.
void checkpoint_commit(const std::string& run, int step, const std::function<void(const std::string& dir)>& write);

// Removes the leftovers of an interrupted writer and restores the top-level links; returns the names removed.
std::vector<std::string> checkpoint_clean(const std::string& run);

// Forgets RUN's checkpoint (a fresh start with --force): the link first, then the files.
void checkpoint_remove(const std::string& run);

// Checks `run` before `aah train` touches it (nothing is created when it refuses): with `resume`, it must be a
// run with a checkpoint (a run stopped before its first checkpoint is told to start again with --force); without,
// it must not hold another run's results unless `force`, and never be a file, a corpus or a suite directory.
void run_dir_check(const std::string& run, bool resume, bool force);

// Test hook: with AAH_CHECKPOINT_DELAY_MS=N in the environment, sleeps N ms (called between the files of a
// checkpoint and before its commit), so kill tests can land in the middle of a checkpoint write. No-op otherwise.
void checkpoint_test_delay();

// Holds an exclusive lock (flock) on RUN/.lock while it lives: one `aah train` per run directory, so that cleaning
// up leftovers never touches the files of a live writer. The kernel drops the lock when the process dies. A run
// that failed before writing anything leaves no trace: when RUN holds only .lock at the end, .lock is removed, and
// RUN too if `created` (this run made the directory).
class RunLock {
 public:
  explicit RunLock(const std::string& run, bool created = false);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
  std::string run_;
  bool created_ = false;
};

}  // namespace aah
