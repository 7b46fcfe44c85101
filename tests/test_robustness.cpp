// Hostile and careless input around the readers: where output goes (never through a device, FIFO or socket; a run,
// a corpus and a suite directory never become one another), what an input stream is (a FIFO or device is refused
// at once; standard input has a limit), command-line numbers (range-checked, the flag named), messages that name the
// right thing, and nothing created in a directory aah refuses.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/process.h"
#include "helpers.h"
#include "io/files.h"
#include "io/synth.h"
#include "model/config.h"

namespace aah {
namespace {

using test::error_of;
using test::TempDir;
namespace fs = std::filesystem;

struct Result {
  int rc;
  std::string out;
};

// Runs a shell command line with the aah binary as $AAH (one OpenMP thread); stdout and stderr together.
Result sh(const std::string& cmd) {
  Result r;
  r.rc = process_run({"env", "OMP_NUM_THREADS=1", std::string("AAH=") + AAH_BINARY, "sh", "-c", cmd}, {.output = &r.out});
  return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A small synth corpus (vocabulary 96) and a 6-step run on it, made once.
struct Fixture {
  TempDir dir{"robust"};
  std::string data = dir.path + "/data", run = dir.path + "/run";
  Fixture() {
    SynthOptions so;
    so.tokens = 20000;
    so.vocab_size = 96;
    so.doc_tokens = 128;
    so.keys = 8;
    so.min_distance = 4;
    so.max_distance = 24;
    synth_write(data, so);
    const Result r = sh("$AAH train --quiet --data " + data + " --out " + run + " " + small_model());
    EXPECT_EQ(r.rc, 0) << r.out;
  }
  // vocab_size 128 > the tokenizer's 96 ids: generate must never emit one it cannot decode.
  static std::string small_model() {
    return "--set hidden_size=32 --set intermediate_size=64 --set num_hidden_layers=1 --set num_attention_heads=2 "
           "--set num_key_value_heads=1 --set head_dim=16 --set vocab_size=128 --set train.context=32 "
           "--set train.batch_size=2 --set train.steps=6 --set train.eval_windows=2 --set train.log_interval=2";
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

TEST(Robustness, OutputPathsNeverWriteThroughDevicesFifosOrSockets) {
  TempDir d("robust_out");
  const std::string fifo = d.path + "/fifo", dev_link = d.path + "/null-link";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("/dev/null", dev_link);
  std::string msg = error_of([&] { write_file_atomic(fifo, "x"); });
  EXPECT_TRUE(has(msg, fifo) && has(msg, "FIFO")) << msg;
  EXPECT_TRUE(fs::is_fifo(fifo));
  msg = error_of([&] { write_file_atomic(dev_link, "x"); });
  EXPECT_TRUE(has(msg, "character device") && has(msg, "a link to /dev/null")) << msg;
  EXPECT_TRUE(fs::is_symlink(dev_link));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  msg = error_of([&] { write_file_atomic(d.path, "x"); });
  EXPECT_TRUE(has(msg, "directory")) << msg;

  // The command line: tokenizer train onto a device (through a link) or a FIFO is refused, nothing replaced.
  const std::string text = d.file("in.txt", "hello world hello there\n");
  for (const std::string& out : {dev_link, fifo}) {
    const Result r = sh("$AAH tokenizer train --in " + text + " --out " + out + " --vocab 300 --force");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_TRUE(has(r.out, out) && has(r.out, "aah writes only regular files")) << r.out;
  }
  EXPECT_TRUE(fs::is_symlink(dev_link) && fs::is_fifo(fifo) && fs::is_character_file("/dev/null"));
}

TEST(Robustness, RunCorpusAndSuiteDirectoriesNeverBecomeAnother) {
  Fixture& f = fixture();
  const std::string tok_before = read_file(f.data + "/tokenizer.json");
  // train --out onto a corpus: refused even with --force; the corpus's tokenizer is untouched.
  Result r = sh("$AAH train --quiet --force --data " + f.data + " --out " + f.data + " " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "--out " + f.data + " is a corpus directory")) << r.out;
  EXPECT_EQ(read_file(f.data + "/tokenizer.json"), tok_before);
  EXPECT_FALSE(path_exists(f.data + "/.lock"));
  // data synth --out onto a run, with --force: refused, the run's files stay.
  const std::string config_before = read_file(f.run + "/config.json");
  r = sh("$AAH data synth --out " + f.run + " --tokens 5000 --force");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "is a run directory")) << r.out;
  EXPECT_EQ(read_file(f.run + "/config.json"), config_before);
  EXPECT_FALSE(path_exists(f.run + "/train.bin"));
  // suite --out onto a corpus or a run: refused.
  for (const std::string& dir : {f.data, f.run}) {
    r = sh("$AAH suite --preset smoke --out " + dir);
    EXPECT_NE(r.rc, 0);
    EXPECT_TRUE(has(r.out, "[suite] --out " + dir + " is a")) << r.out;
    EXPECT_FALSE(path_exists(dir + "/suite.json"));
  }
  // --out that is a plain file says so.
  TempDir d("robust_file");
  const std::string plain = d.file("plain.txt", "x");
  r = sh("$AAH train --quiet --data " + f.data + " --out " + plain + " " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, plain + " is a file, not a directory")) << r.out;
  // A directory of someone else's files with a config.json: refused without --force, the file kept.
  const std::string mine = d.file("mine/config.json", "{\"mine\": 1}");
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/mine " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "holds a config.json that is not from an aah run")) << r.out;
  EXPECT_EQ(read_file(mine), "{\"mine\": 1}");
}

TEST(Robustness, InputStreamsAreRefusedAtOnceAndStdinHasALimit) {
  Fixture& f = fixture();
  TempDir d("robust_in");
  const std::string fifo = d.path + "/fifo", zero_link = d.path + "/zero";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", zero_link);
  // No writer ever opens the FIFO: a reader that waited would hang the test.
  std::string msg = error_of([&] { read_file(fifo); });
  EXPECT_TRUE(has(msg, fifo) && has(msg, "FIFO (named pipe), not a regular file")) << msg;
  msg = error_of([&] { read_file(zero_link); });
  EXPECT_TRUE(has(msg, "character device (a link to /dev/zero)")) << msg;
  msg = error_of([&] { ByteSource::file(fifo, "[shard]"); });
  EXPECT_TRUE(has(msg, "[shard] " + fifo) && has(msg, "FIFO")) << msg;

  // As shard, tokenizer, config and checkpoint file, through the command line.
  const std::string corpus = d.path + "/corpus";
  fs::create_directories(corpus);
  fs::copy_file(f.data + "/val.bin", corpus + "/val.bin");
  fs::copy_file(f.data + "/meta.json", corpus + "/meta.json");
  ASSERT_EQ(::mkfifo((corpus + "/train.bin").c_str(), 0644), 0);
  Result r = sh("$AAH train --quiet --data " + corpus + " --out " + d.path + "/r1 " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, corpus + "/train.bin") && has(r.out, "FIFO")) << r.out;
  r = sh("$AAH tokenize --tokenizer " + fifo + " --ids < /dev/null");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "FIFO")) << r.out;
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/r2 --config " + fifo);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "FIFO")) << r.out;
  // A run whose config.json is a FIFO: reported as what it is, not as missing.
  const std::string run = d.path + "/run";
  fs::create_directories(run);
  ASSERT_EQ(::mkfifo((run + "/config.json").c_str(), 0644), 0);
  r = sh("$AAH eval --run " + run + " --data " + f.data);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "FIFO") && !has(r.out, "no config.json")) << r.out;

  // Standard input: an endless stream stops at the limit with a clear error.
  r = sh("$AAH tokenize --tokenizer " + f.data + "/tokenizer.json --ids < /dev/zero");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "standard input: more than the limit")) << r.out;
}

TEST(Robustness, GenerateNumbersAreRangeCheckedAndNamed) {
  Fixture& f = fixture();
  const std::string base = "$AAH generate --run " + f.run + " --prompt '<doc> k1' ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--max-new -1", "--max-new"},       {"--max-new 0", "--max-new"},      {"--max-new 100000000", "--max-new"},
      {"--temperature nan", "--temperature"}, {"--temperature -1", "--temperature"}, {"--top-k -3", "--top-k"},
      {"--top-p nan", "--top-p"},          {"--top-p 0", "--top-p"},          {"--top-p 1.5", "--top-p"},
      {"--top-p -0.5", "--top-p"}};
  for (auto& [flags, named] : bad) {
    const Result r = sh(base + flags);
    EXPECT_NE(r.rc, 0) << flags << ": " << r.out;
    EXPECT_TRUE(has(r.out, named)) << flags << ": " << r.out;
  }
  // The model has 128 rows, the tokenizer 96 ids: a hot, long sample never emits an id it cannot decode.
  const Result r = sh(base + "--max-new 300 --temperature 20 --top-k 0 --top-p 1 --seed 9");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(has(r.out, "cannot decode")) << r.out;
}

TEST(Robustness, KnobValuesOutsideTheirMeaningAreErrorsNamingTheKey) {
  auto error_for = [](const std::vector<std::string>& sets) {
    return error_of([&] {
      Config c;
      for (auto& s : sets) config_set(c, s);
      config_validate(c);
    });
  };
  for (const char* tau : {"aah.tau=1.5", "aah.tau=-1.01"}) {
    const std::string msg = error_for({"aah.regime=full_adaptive", tau});
    EXPECT_TRUE(has(msg, "aah.tau")) << msg;
  }
  std::string msg = error_for({"train.steps=100", "train.checkpoint_steps=[50,200]"});
  EXPECT_TRUE(has(msg, "train.checkpoint_steps") && has(msg, "200") && has(msg, "past the last step")) << msg;
  // The parameter limit names the key that made the model large.
  msg = error_for({"vocab_size=9000000"});
  EXPECT_TRUE(has(msg, "'vocab_size'") && has(msg, "2B")) << msg;
  msg = error_for({"intermediate_size=2000000"});
  EXPECT_TRUE(has(msg, "'intermediate_size'")) << msg;
  // In range: accepted.
  Config ok;
  config_set(ok, "aah.tau=-1");
  config_set(ok, "train.checkpoint_steps=[1000]");
  config_validate(ok);
}

TEST(Robustness, RefusedResumeCreatesNothingAndEarlyKillsSayHowToGoOn) {
  Fixture& f = fixture();
  TempDir d("robust_resume");
  // --resume of a directory that is not a run: refused, nothing created in it.
  const std::string other = d.path + "/other";
  d.file("other/notes.txt", "mine");
  Result r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + other);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "not a run directory")) << r.out;
  EXPECT_EQ(list_dir(other), std::vector<std::string>{"notes.txt"});
  // A run stopped before its first checkpoint: --resume says to start again with --force, and so does a new start.
  const std::string early = d.path + "/early";
  fs::create_directories(early);
  write_file_atomic(early + "/config.json", read_file(f.run + "/config.json"));
  write_file_atomic(early + "/metrics.jsonl", "");
  r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + early);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "stopped before its first checkpoint") && has(r.out, "--force")) << r.out;
  r = sh("$AAH train --quiet --data " + f.data + " --out " + early + " " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "stopped before its first checkpoint") && has(r.out, "--force")) << r.out;
  r = sh("$AAH train --quiet --force --data " + f.data + " --out " + early + " " + Fixture::small_model());
  EXPECT_EQ(r.rc, 0) << r.out;
}

// metrics.jsonl without what depends on the clock or memory: one line per entry.
std::vector<std::string> metrics_without_timing(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* k : {"tokens_per_s", "peak_rss_mb", "elapsed_s", "allreduce_ms", "allreduce_share"}) j.erase(k);
    lines.push_back(j.dump());
  }
  return lines;
}

TEST(Robustness, ResumeLogsWhatAnUninterruptedRunLogs) {
  Fixture& f = fixture();
  TempDir d("robust_log");
  // Log every 3 steps, checkpoint every 4: resumes land inside a log window, whose average must still cover it all.
  const std::string model = Fixture::small_model() +
                            " --set train.steps=12 --set train.log_interval=3 --set train.checkpoint_interval=4 "
                            "--set aah.regime=full_adaptive --set aah.control_interval=2";
  Result r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/whole " + model);
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::vector<std::string> whole = metrics_without_timing(d.path + "/whole/metrics.jsonl");
  ASSERT_EQ(whole.size(), 4u);
  for (const int stop : {4, 5}) {  // 5: a stop checkpoint between the regular ones
    const std::string run = d.path + "/stopped" + std::to_string(stop);
    r = sh("$AAH train --quiet --data " + f.data + " --out " + run + " " + model + " --stop-after " +
           std::to_string(stop));
    ASSERT_EQ(r.rc, 0) << r.out;
    r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + run);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(metrics_without_timing(run + "/metrics.jsonl"), whole) << "stopped after step " << stop;
  }
}

TEST(Robustness, EvalRefusesAnUnreadableControllerState) {
  Fixture& f = fixture();
  TempDir d("robust_eval");
  const std::string run = d.path + "/run";
  fs::copy(f.run, run, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  Result r = sh("$AAH eval --run " + run + " --data " + f.data);
  ASSERT_EQ(r.rc, 0) << r.out;
  // A dangling link where the state was: an error naming it, not a silent re-decision.
  fs::remove(run + "/controller_state.safetensors");
  fs::create_symlink("checkpoint/none.safetensors", run + "/controller_state.safetensors");
  r = sh("$AAH eval --run " + run + " --data " + f.data);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "controller_state.safetensors")) << r.out;
  // Missing altogether: the same.
  fs::remove(run + "/controller_state.safetensors");
  r = sh("$AAH eval --run " + run + " --data " + f.data);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "controller_state.safetensors is missing")) << r.out;
}

}  // namespace
}  // namespace aah
