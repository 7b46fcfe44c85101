// Golden outputs: refactoring must not change what aah computes, bit for bit. Short runs of the real binary (full,
// full_adaptive, shallow_freeze with a controller trace), the smoke suite, an evaluation and a sampled decode are
// reduced to SHA-256 digests (timings, memory and wall-clock fields removed) and compared with the digests recorded
// for this machine's arithmetic in tests/golden/<key>.json. Floating-point results depend on the instruction set the
// kernels were compiled for and on OpenBLAS's kernel for this CPU, so the key names both; a machine without a
// recorded file skips (and says how to record one: AAH_GOLDEN_RECORD=1). The key also names the compiler.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "core/process.h"
#include "io/checksum.h"
#include "io/files.h"

extern "C" char* openblas_get_corename(void);

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AAH_GOLDEN_ASAN 1
#endif
#endif
#ifndef AAH_GOLDEN_ASAN
#define AAH_GOLDEN_ASAN 0
#endif

namespace aah {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string instruction_set() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#else
  return "generic";
#endif
}

// The compiler and its optimization level also change the arithmetic (contraction into FMA, vectorization): the
// sanitizer build (clang -O1) computes other bits than the release build (g++ -O3).
std::string compiler() {
#if defined(__clang__)
  std::string c = "clang" + std::to_string(__clang_major__);
#elif defined(__GNUC__)
  std::string c = "gcc" + std::to_string(__GNUC__);
#else
  std::string c = "cc";
#endif
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !AAH_GOLDEN_ASAN
  return c;
#else
  return c + "-debug-or-sanitized";
#endif
}

// The OpenBLAS core the aah binary runs, which can differ from this test process's: aah restarts itself with
// OPENBLAS_CORETYPE set where OpenBLAS misreads the CPU (core/sys.h), and `aah info` says which core it runs.
std::string aah_blas_core() {
  static const std::string core = [] {
    std::string out;
    const std::string tag = "openblas core: ";
    if (process_run({AAH_BINARY, "info"}, {.output = &out}) == 0)
      if (const size_t at = out.find(tag); at != std::string::npos) {
        const size_t from = at + tag.size();
        return out.substr(from, out.find_first_of(" \n", from) - from);
      }
    return std::string(openblas_get_corename());
  }();
  return core;
}

std::string golden_key() { return instruction_set() + "-" + compiler() + "-openblas-" + aah_blas_core(); }

std::string golden_path() { return std::string(AAH_SOURCE_DIR) + "/tests/golden/" + golden_key() + ".json"; }

// Drops what depends on the clock or the machine's load: throughput, memory, elapsed and wall times.
bool is_timing_key(const std::string& k) {
  for (const char* s : {"per_s", "rss", "peak", "_mb", "elapsed", "seconds", "_ms", "time", "eta", "wall"})
    if (k.find(s) != std::string::npos) return true;
  return k.size() > 2 && k.compare(k.size() - 2, 2, "_s") == 0;
}

json without_timing(const json& j) {
  if (j.is_object()) {
    json out = json::object();
    for (auto& [k, v] : j.items())
      if (!is_timing_key(k)) out[k] = without_timing(v);
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (auto& v : j) out.push_back(without_timing(v));
    return out;
  }
  return j;
}

std::string file_digest(const std::string& path) { return sha256_hex(read_file(path)); }

// metrics.jsonl, eval.json and the like: one JSON value per line, timing fields removed.
std::string json_lines_digest(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string line, canon;
  while (std::getline(in, line))
    if (!line.empty()) canon += without_timing(json::parse(line)).dump() + "\n";
  return sha256_hex(canon);
}

// A CSV without the columns whose header names a timing, and without the rows that name one (summary.csv is long
// form: regime, source, metric, ...).
std::string csv_digest(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string line, canon;
  std::vector<bool> keep;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ss(line);
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (keep.empty())
      for (auto& c : cells) keep.push_back(!is_timing_key(c));
    if (std::any_of(cells.begin(), cells.end(), is_timing_key)) continue;
    for (size_t i = 0; i < cells.size(); i++)
      if (i >= keep.size() || keep[i]) canon += cells[i] + ",";
    canon += "\n";
  }
  return sha256_hex(canon);
}

// Runs the aah binary (two OpenMP threads, whatever the machine: reductions may depend on the team size); returns
// its stdout and stderr; fails the test on a non-zero exit.
std::string aah(std::vector<std::string> args) {
  std::vector<std::string> argv = {"env", "OMP_NUM_THREADS=2", AAH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  const int rc = process_run(argv, {.output = &out});
  EXPECT_EQ(rc, 0) << out;
  return out;
}

// Everything the golden file holds, computed now.
json compute_digests(const std::string& dir) {
  json d = json::object();
  const std::string data = dir + "/data";
  aah({"data", "synth", "--out", data, "--tokens", "60000", "--vocab", "96", "--seed", "5"});
  const std::vector<std::string> model = {
      "--set", "hidden_size=48", "--set", "intermediate_size=96", "--set", "num_hidden_layers=2",
      "--set", "num_attention_heads=4", "--set", "num_key_value_heads=2", "--set", "head_dim=12",
      "--set", "vocab_size=96", "--set", "train.context=64", "--set", "train.batch_size=2",
      "--set", "train.steps=24", "--set", "train.warmup_steps=3", "--set", "train.log_interval=2",
      "--set", "train.eval_interval=8", "--set", "train.eval_windows=4", "--set", "aah.control_interval=2",
      "--set", "train.seed=11"};
  for (const std::string regime : {"full", "full_adaptive", "shallow_freeze"}) {
    const std::string run = dir + "/run-" + regime;
    std::vector<std::string> args = {"train", "--quiet", "--data", data, "--out", run, "--set", "aah.regime=" + regime,
                                     "--trace-controller", run + ".trace.jsonl"};
    args.insert(args.end(), model.begin(), model.end());  // after the regime: a regime resets the aah.* knobs
    aah(args);
    d[regime + "/metrics.jsonl"] = json_lines_digest(run + "/metrics.jsonl");
    d[regime + "/model.safetensors"] = file_digest(run + "/model.safetensors");
    d[regime + "/trace.jsonl"] = file_digest(run + ".trace.jsonl");
    if (fs::exists(run + "/controller_state.safetensors"))
      d[regime + "/controller_state.safetensors"] = file_digest(run + "/controller_state.safetensors");
    const std::string ev = aah({"eval", "--run", run, "--data", data, "--json"});
    write_file_atomic(run + ".eval.json", ev.substr(ev.find('{')));
    d[regime + "/eval"] = json_lines_digest(run + ".eval.json");
  }
  // A decode: batched prefill of the prompt, then token-by-token steps over the per-head KV cache, sampled.
  std::string text = aah({"generate", "--run", dir + "/run-full_adaptive", "--prompt", "<doc> <def> k3 k9 <ask> k3",
                                "--max-new", "48", "--temperature", "0.9", "--seed", "4"});
  text.erase(text.find("[generate]"));  // the timing line on stderr
  d["decode"] = sha256_hex(text);
  // The smoke suite: every run's metrics and evaluation, and the report's numbers.
  const std::string suite = dir + "/suite";
  aah({"suite", "--preset", "smoke", "--out", suite});
  for (auto& entry : fs::directory_iterator(suite + "/runs")) {
    const std::string name = entry.path().filename();
    d["smoke/" + name + "/metrics.jsonl"] = json_lines_digest(entry.path().string() + "/metrics.jsonl");
    d["smoke/" + name + "/eval.json"] = sha256_hex(without_timing(json::parse(read_file(entry.path().string() + "/eval.json"))).dump());
  }
  d["smoke/summary.csv"] = csv_digest(suite + "/summary.csv");
  d["smoke/runs.csv"] = csv_digest(suite + "/runs.csv");
  return d;
}

TEST(Golden, OutputsAreBitIdenticalToTheRecordedOnes) {
  const bool record = std::getenv("AAH_GOLDEN_RECORD") != nullptr;
  if (!record && !fs::exists(golden_path()))
    GTEST_SKIP() << "no golden digests for " << golden_key() << " (tests/golden/): record them from a known-good "
                 << "commit with AAH_GOLDEN_RECORD=1 ctest -R Golden";
  test::TempDir dir("golden");
  const json now = compute_digests(dir.path);
  if (record) {
    fs::create_directories(fs::path(golden_path()).parent_path());
    write_file_atomic(golden_path(), now.dump(2) + "\n");
    std::printf("recorded %s\n", golden_path().c_str());
    return;
  }
  const json want = json::parse(read_file(golden_path()));
  for (auto& [k, v] : want.items()) {
    ASSERT_TRUE(now.contains(k)) << k << " is no longer produced";
    EXPECT_EQ(now[k], v) << k << " changed";
  }
  for (auto& [k, v] : now.items()) EXPECT_TRUE(want.contains(k)) << k << " is new: record the golden file again";
}

}  // namespace
}  // namespace aah
