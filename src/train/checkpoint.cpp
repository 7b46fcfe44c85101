#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/check.h"
#include "core/files.h"

namespace aah {

namespace {

// "<anything>.tmp.<digits>": a temporary name of write_file_atomic, symlink_atomic or checkpoint_commit.
bool is_temp_name(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  return at != std::string::npos && at + 5 < name.size() &&
         name.find_first_not_of("0123456789", at + 5) == std::string::npos;
}

// Points RUN/<file> at checkpoint/<file> for each checkpoint file, where it does not already.
void link_files(const std::string& run) {
  for (const char* f : kCheckpointFiles) {
    const std::string target = std::string("checkpoint/") + f;
    if (read_link(run + "/" + f) != target) symlink_atomic(target, run + "/" + f);
  }
}

}  // namespace

std::string checkpoint_dir(const std::string& run) {
  const std::string current = read_link(run + "/checkpoint");
  if (!current.empty()) return run + "/" + current;
  if (file_exists(run + "/training_state.safetensors")) return run;  // older layout, files at the top level
  return "";
}

void checkpoint_commit(const std::string& run, int step, const std::function<void(const std::string& dir)>& write) {
  const std::string name = str_cat("ckpt-", step), final_dir = run + "/" + name;
  const std::string tmp = str_cat(final_dir, ".tmp.", ::getpid());
  const std::string previous = read_link(run + "/checkpoint");
  if (previous == name) fail("[checkpoint] ", run, ": step ", step, " is already the current checkpoint");
  try {
    remove_tree(tmp);
    make_dirs(tmp);
    write(tmp);  // every file fsynced and renamed into place inside tmp, tmp fsynced
    remove_tree(final_dir);  // an uncommitted copy a killed writer left
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0)
      fail("[checkpoint] ", run, ": cannot rename ", tmp, " to ", final_dir, ": ", std::strerror(errno));
  } catch (...) {
    try {
      remove_tree(tmp);
    } catch (const Error&) {  // the first error is the one to report; checkpoint_clean retries at the next start
    }
    throw;
  }
  fsync_dir(run);
  checkpoint_test_delay();
  symlink_atomic(name, run + "/checkpoint");  // the commit
  link_files(run);
  if (!previous.empty()) remove_tree(run + "/" + previous);
}

std::vector<std::string> checkpoint_clean(const std::string& run) {
  const std::string current = read_link(run + "/checkpoint");
  std::vector<std::string> removed;
  for (const std::string& name : list_dir(run)) {
    const bool stale_dir = name.rfind("ckpt-", 0) == 0 && name != current;
    if (stale_dir || is_temp_name(name)) {
      remove_tree(run + "/" + name);
      removed.push_back(name);
    }
  }
  if (!removed.empty()) fsync_dir(run);
  if (!current.empty()) link_files(run);
  return removed;
}

void checkpoint_remove(const std::string& run) {
  remove_tree(run + "/checkpoint");
  fsync_dir(run);
  for (const char* f : kCheckpointFiles) remove_tree(run + "/" + f);
  checkpoint_clean(run);
}

void checkpoint_test_delay() {
  static const int ms = [] {
    const char* s = std::getenv("AAH_CHECKPOINT_DELAY_MS");
    return s ? std::atoi(s) : 0;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

RunLock::RunLock(const std::string& run, bool created) : run_(run), created_(created) {
  fd_ = lock_file_exclusive(run + "/.lock", "[train]",
                            str_cat(run, ": another aah train is using this run directory (", run, "/.lock is locked)"));
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  bool only_lock = true;  // unlinked while still held: another aah train cannot take it in between
  for (const auto& e : std::filesystem::directory_iterator(run_, ec))
    if (e.path().filename() != ".lock") only_lock = false;
  if (!ec && only_lock) {
    ::unlink((run_ + "/.lock").c_str());
    if (created_) ::rmdir(run_.c_str());
  }
  ::close(fd_);
}

void run_dir_check(const std::string& run, bool resume, bool force) {
  dir_check_kind(run, DirKind::run, "[train]", "--out", force || resume,
                 {"config.json", "metrics.jsonl", "tokenizer.json", "model.safetensors", "data.json",
                  "training_state.safetensors", "controller_state.safetensors", "checkpoint", "eval.json",
                  "oracle.json", "probe.json"});
  const DirKind kind = dir_kind(run);
  const bool has_checkpoint = kind == DirKind::run && !checkpoint_dir(run).empty();
  if (resume) {
    if (kind == DirKind::missing) fail("[train] --resume ", run, ": no such run directory");
    if (kind != DirKind::run) fail("[train] --resume ", run, ": not a run directory (it is ", dir_kind_name(kind), ")");
    if (!has_checkpoint)
      fail("[train] --resume ", run, ": the run stopped before its first checkpoint (", run, "/checkpoint is missing), ",
           "so there is nothing to continue: start it again with --force (train.checkpoint_interval=N checkpoints ",
           "every N steps)");
    return;
  }
  if (kind != DirKind::run || force) return;  // new, empty, other files beside (dir_check_kind), or --force on a run
  if (has_checkpoint)
    fail("[train] ", run, " already holds a run: use --resume to continue it or --force to overwrite it");
  fail("[train] ", run, " already holds a run that stopped before its first checkpoint: use --force to start it ",
       "again");
}

}  // namespace aah
