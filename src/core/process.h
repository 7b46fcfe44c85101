// Child processes: run a program, wait for it, and capture or stream what it writes. The one runner behind
// `aah data` (npm, tar, dpkg-query), the suite (`aah train` / `aah eval` children) and the tests (node, python3,
// the aah binary).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace aah {

// Every member has a default initializer, so that callers name only what they set:
// process_run(argv, {.cwd = dir, .output = &out}).
struct ProcessOptions {
  // The child's working directory; "" = ours.
  std::string cwd{};
  // Captures the child's stdout (all of it), and its stderr too, interleaved, unless on_stderr_line is set.
  // null: the child writes to our stdout.
  std::string* output = nullptr;
  // Gets each line the child writes to stderr (without '\n'), as it comes. Empty: the child's stderr goes where
  // its stdout goes.
  std::function<void(const std::string&)> on_stderr_line{};
  // SIGINT and SIGTERM that reach us meanwhile are passed on to the child, and we go on waiting for it (the suite:
  // Ctrl-C makes `aah train` checkpoint and exit; the suite then reports it).
  bool forward_signals = false;
};

// Runs argv (argv[0] looked up in PATH unless it holds a '/') with stdin from /dev/null, and waits for it.
// Returns its exit status, 127 if it could not start (why goes where its stderr would), 128 + N if signal N
// killed it.
int process_run(const std::vector<std::string>& argv, const ProcessOptions& opt = {});

}  // namespace aah
