// Golden outputs: refactoring must not change what aah computes. Short runs of the real binary (full, full_adaptive,
// shallow_freeze with a controller trace), the smoke suite, an evaluation and a sampled decode with its
// log-probabilities are checked two ways:
// * bit for bit: reduced to SHA-256 digests (timings, memory and wall-clock fields removed) and compared with the
//   digests recorded for this machine's arithmetic in tests/golden/<key>.json. Floating-point results depend on the
//   instruction set the kernels were compiled for and on OpenBLAS's kernel for this CPU, so the key names both (and
//   the compiler); a machine without a record says so, and how to make one (AAH_GOLDEN_RECORD=1);
// * across machines: the losses, evaluations, window decisions and decode log-probabilities against
//   tests/golden/values.json, within tolerances derived from the spread measured across the arithmetics recorded
//   there (scripts/golden_values.sh). Any correct build passes it on any CPU; a perturbed run fails it (a test
//   checks that).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "core/process.h"
#include "formats/checksum.h"
#include "core/files.h"

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

std::string golden_path_for(const std::string& key) {
  return std::string(AAH_SOURCE_DIR) + "/tests/golden/" + key + ".json";
}
std::string golden_path() { return golden_path_for(golden_key()); }

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

// Runs the aah binary (two OpenMP threads unless `threads` says otherwise); returns its stdout and stderr; fails
// the test on a non-zero exit.
std::string aah(std::vector<std::string> args, int threads = 2) {
  std::vector<std::string> argv = {"env", "OMP_NUM_THREADS=" + std::to_string(threads), AAH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  const int rc = process_run(argv, {.output = &out});
  EXPECT_EQ(rc, 0) << out;
  return out;
}

std::vector<json> json_lines(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string line;
  std::vector<json> out;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The golden runs' model: small enough for seconds, with 8 heads in 2 layers so that the hierarchy's shape
// ([2,2,2,2] against shallow_freeze's [2]) changes the decisions.
std::vector<std::string> golden_model_args() {
  return {"--set", "hidden_size=48", "--set", "intermediate_size=96", "--set", "num_hidden_layers=2",
          "--set", "num_attention_heads=8", "--set", "num_key_value_heads=4", "--set", "head_dim=6",
          "--set", "vocab_size=96", "--set", "train.context=64", "--set", "train.batch_size=2",
          "--set", "train.steps=24", "--set", "train.warmup_steps=3", "--set", "train.log_interval=2",
          "--set", "train.eval_interval=8", "--set", "train.eval_windows=4", "--set", "aah.control_interval=2",
          "--set", "train.seed=11"};
}

const std::vector<std::string> kGoldenRegimes = {"full", "full_adaptive", "shallow_freeze"};

struct GoldenOutputs {
  json digests = json::object();  // file -> SHA-256 of its arithmetic-dependent content
  json values = json::object();   // the numbers the cross-machine check compares
};

// Trains the golden regimes (plus `extra` --set arguments after the model's), evaluates them; with `everything`
// also a sampled decode and the smoke suite.
GoldenOutputs compute_golden(const std::string& dir, const std::vector<std::string>& extra, bool everything,
                             int threads = 2) {
  GoldenOutputs g;
  json& d = g.digests;
  const std::string data = dir + "/data";
  if (!fs::exists(data)) aah({"data", "synth", "--out", data, "--tokens", "60000", "--vocab", "96", "--seed", "5"});
  for (const std::string& regime : kGoldenRegimes) {
    const std::string run = dir + "/run-" + regime;
    std::vector<std::string> args = {"train", "--quiet", "--data", data, "--out", run, "--set", "aah.regime=" + regime,
                                     "--trace-controller", run + ".trace.jsonl"};
    for (const auto& a : golden_model_args()) args.push_back(a);  // after the regime: a regime resets aah.* knobs
    for (const auto& a : extra) args.push_back(a);
    aah(args, threads);
    d[regime + "/metrics.jsonl"] = json_lines_digest(run + "/metrics.jsonl");
    d[regime + "/model.safetensors"] = file_digest(run + "/model.safetensors");
    if (regime == "full")  // policy off: no control update, so no trace line (checked, not digested)
      EXPECT_EQ(read_file(run + ".trace.jsonl"), "") << "full attention wrote controller trace lines";
    else
      d[regime + "/trace.jsonl"] = file_digest(run + ".trace.jsonl");
    if (fs::exists(run + "/controller_state.safetensors"))
      d[regime + "/controller_state.safetensors"] = file_digest(run + "/controller_state.safetensors");
    const std::string ev = aah({"eval", "--run", run, "--data", data, "--json"}, threads);
    write_file_atomic(run + ".eval.json", ev.substr(ev.find('{')));
    d[regime + "/eval"] = json_lines_digest(run + ".eval.json");
    json v = {{"loss", json::array()}, {"val_loss", json::array()}, {"pair_ratio", json::array()}};
    for (const json& line : json_lines(run + "/metrics.jsonl")) {
      v["loss"].push_back(line.at("loss"));
      v["pair_ratio"].push_back(line.at("pair_ratio"));
      if (line.contains("val_loss")) v["val_loss"].push_back(line.at("val_loss"));
    }
    const json e = json::parse(read_file(run + ".eval.json"));
    v["eval_val_loss"] = e.at("val_loss");
    v["window_map"] = e.at("window_map");
    g.values[regime] = v;
  }
  if (!everything) return g;
  // A decode: batched prefill of the prompt, then token-by-token steps over the per-head KV cache, sampled; the
  // log-probabilities of the sampled tokens carry the decoder's arithmetic.
  const std::string lp = dir + "/decode.logprobs.jsonl";
  std::string text = aah({"generate", "--run", dir + "/run-full_adaptive", "--prompt", "<doc> <def> k3 k9 <ask> k3",
                          "--max-new", "48", "--temperature", "0.9", "--seed", "4", "--logprobs", lp}, threads);
  text.erase(text.find("[generate]"));  // the timing line on stderr
  d["decode"] = sha256_hex(text);
  d["decode/logprobs.jsonl"] = file_digest(lp);
  json tokens = json::array(), logprobs = json::array();
  for (const json& line : json_lines(lp)) tokens.push_back(line.at("token")), logprobs.push_back(line.at("logprob"));
  g.values["decode"] = {{"tokens", tokens}, {"logprob", logprobs}};
  // The smoke suite: every run's metrics and evaluation, and the report's numbers.
  const std::string suite = dir + "/suite";
  aah({"suite", "--preset", "smoke", "--out", suite}, threads);
  for (auto& entry : fs::directory_iterator(suite + "/runs")) {
    const std::string name = entry.path().filename();
    d["smoke/" + name + "/metrics.jsonl"] = json_lines_digest(entry.path().string() + "/metrics.jsonl");
    const json ev = json::parse(read_file(entry.path().string() + "/eval.json"));
    d["smoke/" + name + "/eval.json"] = sha256_hex(without_timing(ev).dump());
    g.values["smoke/" + name] = {{"eval_val_loss", ev.at("val_loss")}};
  }
  d["smoke/summary.csv"] = csv_digest(suite + "/summary.csv");
  d["smoke/runs.csv"] = csv_digest(suite + "/runs.csv");
  return g;
}

// The golden runs of this process, computed once and shared by the tests below.
const GoldenOutputs& golden_now() {
  static test::TempDir dir("golden");
  static const GoldenOutputs g = compute_golden(dir.path, {}, /*everything=*/true);
  return g;
}

// The bit-exact comparison against the record for `key`: "" when it holds, else what differs; nullopt when there is
// no record for the key.
std::optional<std::string> bit_exact_mismatches(const json& now, const std::string& key) {
  const std::string path = golden_path_for(key);
  if (!fs::exists(path)) return std::nullopt;
  const json want = json::parse(read_file(path));
  std::string out;
  for (auto& [k, v] : want.items())
    if (!now.contains(k))
      out += k + " is no longer produced\n";
    else if (now[k] != v)
      out += k + " changed\n";
  for (auto& [k, v] : now.items())
    if (!want.contains(k)) out += k + " is new: record the golden file again\n";
  return out;
}

std::string no_record_message(const std::string& key) {
  return "no golden digests for this machine's arithmetic (key " + key + ": no tests/golden/" + key +
         ".json), so nothing is compared bit for bit here; the cross-machine check "
         "(Golden.ValuesAgreeWithinCrossMachineTolerances) still runs. To record this arithmetic from a known-good "
         "commit: AAH_GOLDEN_RECORD=1 build/release/aah_tests --gtest_filter='Golden.*'";
}

// The cross-machine check: every number of `now` against `want` within `tol` (absolute, per quantity); window
// decisions exactly. Returns one line per disagreement.
std::vector<std::string> tolerance_failures(const json& want, const json& now, const json& tol) {
  std::vector<std::string> out;
  auto close = [&](const std::string& what, const json& a, const json& b, double t) {
    if (a.is_array()) {
      if (!b.is_array() || a.size() != b.size()) {
        out.push_back(what + ": " + std::to_string(b.size()) + " values, recorded " + std::to_string(a.size()));
        return;
      }
      for (size_t i = 0; i < a.size(); i++)
        if (!(std::fabs(a[i].get<double>() - b[i].get<double>()) <= t))
          out.push_back(what + "[" + std::to_string(i) + "]: " + b[i].dump() + ", recorded " + a[i].dump() +
                        " (tolerance " + std::to_string(t) + ")");
    } else if (!(std::fabs(a.get<double>() - b.get<double>()) <= t)) {
      out.push_back(what + ": " + b.dump() + ", recorded " + a.dump() + " (tolerance " + std::to_string(t) + ")");
    }
  };
  for (auto& [name, w] : want.items()) {
    if (!now.contains(name)) {
      continue;  // a perturbed run computes only the training runs
    }
    const json& n = now[name];
    for (auto& [q, a] : w.items()) {
      const std::string what = name + "/" + q;
      if (!n.contains(q)) {
        out.push_back(what + " is no longer produced");
      } else if (q == "window_map" || q == "tokens") {
        if (n[q] != a) out.push_back(what + ": " + n[q].dump() + ", recorded " + a.dump());
      } else {
        close(what, a, n[q], tol.at(q).get<double>());
      }
    }
  }
  return out;
}

std::string values_path() { return std::string(AAH_SOURCE_DIR) + "/tests/golden/values.json"; }

TEST(Golden, OutputsAreBitIdenticalToTheRecordedOnes) {
  const GoldenOutputs& g = golden_now();
  if (const char* out = std::getenv("AAH_GOLDEN_VALUES_OUT")) {  // scripts/golden_values.sh: this arithmetic's values
    write_file_atomic(out, json{{"key", golden_key()}, {"values", g.values}}.dump(2) + "\n");
    std::printf("wrote %s\n", out);
  }
  if (std::getenv("AAH_GOLDEN_RECORD")) {
    fs::create_directories(fs::path(golden_path()).parent_path());
    write_file_atomic(golden_path(), g.digests.dump(2) + "\n");
    std::printf("recorded %s\n", golden_path().c_str());
    return;
  }
  const auto mismatches = bit_exact_mismatches(g.digests, golden_key());
  if (!mismatches) GTEST_SKIP() << no_record_message(golden_key());
  EXPECT_EQ(*mismatches, "") << "against tests/golden/" << golden_key() << ".json";
}

TEST(Golden, ValuesAgreeWithinCrossMachineTolerances) {
  const json rec = json::parse(read_file(values_path()));
  const auto failures = tolerance_failures(rec.at("values"), golden_now().values, rec.at("tolerance"));
  std::string all;
  for (const auto& f : failures) all += f + "\n";
  EXPECT_TRUE(failures.empty()) << failures.size() << " values outside the cross-machine tolerances of "
                                << values_path() << ":\n" << all;
  EXPECT_TRUE(golden_now().values.size() == rec.at("values").size()) << "the golden runs produce other values than recorded";
}

// A wrong change must fail the cross-machine check: the same runs with RMSNorm's epsilon 1e-6 -> 1e-5 (a change a
// refactoring could make by accident) leave it.
TEST(Golden, ToleranceCheckRejectsAPerturbedRun) {
  const json rec = json::parse(read_file(values_path()));
  test::TempDir dir("golden-perturbed");
  const GoldenOutputs g = compute_golden(dir.path, {"--set", "rms_norm_eps=1e-5"}, /*everything=*/false);
  const auto failures = tolerance_failures(rec.at("values"), g.values, rec.at("tolerance"));
  EXPECT_GE(failures.size(), 3u) << "a perturbed run passed the cross-machine check: the tolerances are too wide";
  // and the check itself: a recorded value moved by twice its tolerance is caught, by half of it is not
  json moved = rec.at("values");
  const double t = rec.at("tolerance").at("loss").get<double>();
  moved["full"]["loss"][3] = moved["full"]["loss"][3].get<double>() + 2 * t;
  EXPECT_EQ(tolerance_failures(rec.at("values"), moved, rec.at("tolerance")).size(), 1u);
  moved["full"]["loss"][3] = rec.at("values")["full"]["loss"][3].get<double>() + 0.5 * t;
  EXPECT_EQ(tolerance_failures(rec.at("values"), moved, rec.at("tolerance")).size(), 0u);
}

// The no-record path: a key nobody recorded compares nothing and says how to record it.
TEST(Golden, AnUnrecordedKeyIsReportedWithHowToRecordIt) {
  EXPECT_FALSE(bit_exact_mismatches(json::object(), "avx1024-gcc99-openblas-NoSuchCore").has_value());
  const std::string msg = no_record_message("avx1024-gcc99-openblas-NoSuchCore");
  EXPECT_NE(msg.find("AAH_GOLDEN_RECORD=1"), std::string::npos);
  EXPECT_NE(msg.find("tests/golden/avx1024-gcc99-openblas-NoSuchCore.json"), std::string::npos);
  // and a recorded key compares: this machine's own record, when there is one, against a changed digest
  if (fs::exists(golden_path())) {
    json changed = json::parse(read_file(golden_path()));
    changed["full/eval"] = std::string(64, '0');
    const auto m = bit_exact_mismatches(changed, golden_key());
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(*m, "full/eval changed\n");
  }
}

// Results do not depend on the thread count: training (local and dense attention, the controller, the coverage
// policy's mass and the copy policy's use), evaluation and decoding with one and with two OpenMP threads give the
// same bits.
TEST(Golden, RunsAreBitIdenticalWithOneAndTwoThreads) {
  test::TempDir dir("golden-threads");
  const std::string data = dir.path + "/data";
  aah({"data", "synth", "--out", data, "--tokens", "60000", "--vocab", "96", "--seed", "5"});
  for (const std::vector<std::string>& regime :
       {std::vector<std::string>{"aah.regime=full_adaptive"}, {"aah.regime=coverage_budget_500"},
        {"aah.regime=copy_budget_500"}, {"aah.regime=copy_once_budget_500"},
        {"aah.regime=full_adaptive", "aah.attention=dense"}}) {
    std::string digests[2];
    for (int threads : {1, 2}) {
      const std::string run = dir.path + "/run-" + std::to_string(threads) + "-" + std::to_string(regime.size()) +
                              regime[0].substr(11);
      std::vector<std::string> args = {"train", "--quiet", "--data", data, "--out", run};
      for (const auto& r : regime) args.push_back("--set"), args.push_back(r);
      for (const auto& a : golden_model_args()) args.push_back(a);
      aah(args, threads);
      const std::string ev = aah({"eval", "--run", run, "--data", data, "--json"}, threads);
      write_file_atomic(run + ".eval.json", ev.substr(ev.find('{')));
      const std::string lp = run + ".logprobs.jsonl";  // a sampled decode over the KV cache
      aah({"generate", "--run", run, "--prompt", "k3 k9", "--max-new", "24", "--seed", "4", "--logprobs", lp}, threads);
      digests[threads - 1] = file_digest(run + "/model.safetensors") + json_lines_digest(run + "/metrics.jsonl") +
                             json_lines_digest(run + ".eval.json") + file_digest(lp);
    }
    EXPECT_EQ(digests[0], digests[1]) << regime[0] << (regime.size() > 1 ? " " + regime[1] : "")
                                      << ": 1 and 2 threads differ";
  }
}

}  // namespace
}  // namespace aah
