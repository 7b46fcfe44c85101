// Nothing is lost when training is killed: `aah train` run as a child process and SIGKILLed at random moments
// (many during checkpoint writes, slowed down with AAH_CHECKPOINT_DELAY_MS) always leaves a loadable checkpoint,
// and resumed after every kill ends bit-identical to an uninterrupted run. A full disk (a file size limit) fails a
// checkpoint with an error naming the file while the previous one stays intact; SIGTERM checkpoints and exits
// 128 + 15; corrupt files and non-finite weights are refused; loss spikes are logged.
#include <gtest/gtest.h>

#include "helpers.h"
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/files.h"
#include "data/synth.h"
#include "model/config.h"
#include "train/checkpoint.h"
#include "train/train.h"

extern char** environ;

namespace aah {
namespace {

using aah::test::error_of;

std::string temp_dir() {
  char tmpl[] = "/tmp/aah_durability_XXXXXX";
  return mkdtemp(tmpl);
}

using aah::test::TempDir;  // a fresh directory under /tmp, removed when the test ends

std::string make_data() {
  static std::string dir;  // shared by the tests, kept
  if (dir.empty()) {
    dir = temp_dir();
    SynthOptions so;
    so.tokens = 20000;
    so.vocab_size = 128;
    so.doc_tokens = 256;
    so.keys = 8;
    so.min_distance = 4;
    so.max_distance = 24;
    synth_write(dir, so);
  }
  return dir;
}

// 2 layers, hidden 32, context 32, batch 2: a step takes about a millisecond.
Config tiny_config(int steps) {
  Config c;
  ModelConfig& m = c.model;
  m.hidden_size = 32;
  m.intermediate_size = 64;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 8;
  m.vocab_size = 128;
  TrainConfig& t = c.train;
  t.steps = steps;
  t.batch_size = 2;
  t.context = 32;
  t.lr = 3e-3;
  t.min_lr = 3e-4;
  t.warmup_steps = 2;
  t.log_interval = 1;
  t.eval_interval = 0;
  t.eval_windows = 4;
  return c;
}

std::string write_config(const std::string& dir, const Config& c) {
  const std::string path = dir + "/config-in.json";
  write_file_atomic(path, config_to_json(c).dump(2));
  return path;
}

// Starts AAH_BINARY with `args`, stdout and stderr into `log`, one OpenMP thread (the machine is shared). With
// delay_ms > 0 the checkpoint writer sleeps that long between files; with fsize_limit > 0 the child may write no
// file beyond that many bytes (ulimit -f), so such a write fails with EFBIG, as on a full disk; SIGXFSZ is ignored
// before exec unless !ignore_xfsz (aah ignores it itself).
pid_t spawn_aah(const std::vector<std::string>& args, const std::string& log, int delay_ms = 0,
                rlim_t fsize_limit = 0, bool ignore_xfsz = true) {
  std::vector<std::string> argv_s = {AAH_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = {"OMP_NUM_THREADS=1", "AAH_CHECKPOINT_DELAY_MS=" + std::to_string(delay_ms)};
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0 && std::strncmp(*e, "AAH_CHECKPOINT_DELAY_MS=", 24) != 0)
      env_s.push_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  for (auto& e : env_s) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  // Between fork and exec only async-signal-safe calls: the test process may have threads.
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) _exit(126);
    if (fsize_limit > 0) {
      if (ignore_xfsz) ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit lim;
      ::getrlimit(RLIMIT_FSIZE, &lim);
      lim.rlim_cur = fsize_limit;
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(125);
    }
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string exit_str(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Leftovers of a checkpoint write: a temp file or directory, or a ckpt-N that RUN/checkpoint does not name. None
// where the run directory does not exist yet (a kill during start-up, which under ASan on a busy machine can take
// longer than the shortest kill delay).
bool has_checkpoint_leftovers(const std::string& run) {
  if (!std::filesystem::exists(run)) return false;
  const std::string current = read_link(run + "/checkpoint");
  for (const std::string& name : list_dir(run))
    if (name.find(".tmp.") != std::string::npos || (name.rfind("ckpt-", 0) == 0 && name != current)) return true;
  return false;
}

// metrics.jsonl without the fields that measure time and memory.
std::vector<nlohmann::json> metrics_without_timing(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* k : {"tokens_per_s", "elapsed_s", "peak_rss_mb"}) j.erase(k);
    out.push_back(j);
  }
  return out;
}

TEST(Durability, RandomKillsLoseNothingAndResumeBitIdentically) {
  const TempDir tmp("durability");
  const std::string data = make_data(), dir = tmp.path;
  Config cfg = tiny_config(60);
  cfg.train.checkpoint_interval = 4;
  const std::string config = write_config(dir, cfg), log = dir + "/log.txt";

  // Each checkpoint write takes 5 x 8 ms longer, so that many kills land inside one. At least kKills kills, and more
  // (up to kMaxKills) until kInWrite of them landed during a checkpoint write: which ones do is up to the machine's
  // timing (2 of 12 under ASan in CI with 8 ms; 4 ms gave 2 of 12 once too).
  constexpr int kKills = 12, kInWrite = 3, kMaxKills = 48, kDelayMs = 8;
  const std::string ref = dir + "/reference";
  const auto t0 = std::chrono::steady_clock::now();
  int status =
      wait_for(spawn_aah({"train", "--data", data, "--out", ref, "--config", config, "--quiet"}, log, kDelayMs));
  const double ref_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << exit_str(status) << ": " << read_file(log);

  // Kill after a random delay of 3-25% of the uninterrupted run's time (whatever this machine's speed), resume,
  // and so on until the run ends; then compare with the reference. A run that ends before kKills kills were made
  // is followed by another one, in a new directory.
  std::mt19937 rng(20260607);
  std::uniform_real_distribution<double> delay_ms(0.03 * ref_ms, 0.25 * ref_ms);
  int kills = 0, during_write = 0, starts = 0, runs = 0;
  auto kill_more = [&] { return kills < kKills || (during_write < kInWrite && kills < kMaxKills); };
  while (kill_more() && runs < 20) {
    const std::string run = dir + "/killed-" + std::to_string(runs++);
    int last_step = -1;
    for (bool finished = false; !finished && starts < 200;) {
      std::vector<std::string> args = {"train", "--data", data, "--out", run, "--quiet"};
      if (last_step < 0) args.insert(args.end(), {"--config", config, "--force"});  // no checkpoint yet
      else args.push_back("--resume");
      const pid_t pid = spawn_aah(args, log, kDelayMs);
      starts++;
      if (kill_more()) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms(rng)));
        ::kill(pid, SIGKILL);
      }
      status = wait_for(pid);
      if (WIFEXITED(status)) {  // ran to the end, before the kill or unkilled
        ASSERT_EQ(WEXITSTATUS(status), 0) << read_file(log);
        finished = true;
        continue;
      }
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << exit_str(status);
      kills++;
      if (has_checkpoint_leftovers(run)) during_write++;
      int step = -2;
      try {
        step = checkpoint_verify(run);
      } catch (const Error& e) {
        FAIL() << "after kill " << kills << " the checkpoint does not load: " << e.what();
      }
      EXPECT_GE(step, last_step) << "kill " << kills << ": the checkpoint went back";
      last_step = step;
    }
    // The same files, byte for byte (weights, optimizer state, controller state, config), and the same metrics.
    for (const char* f : kCheckpointFiles) EXPECT_TRUE(read_file(ref + "/" + f) == read_file(run + "/" + f)) << f;
    EXPECT_EQ(metrics_without_timing(ref), metrics_without_timing(run));
    EXPECT_EQ(checkpoint_verify(run), 60);
    EXPECT_FALSE(has_checkpoint_leftovers(run));
  }
  EXPECT_GE(kills, kKills);
  EXPECT_GE(during_write, kInWrite) << "too few kills landed during a checkpoint write";
  std::printf("[durability] %d kills (%d during a checkpoint write), %d starts, %d runs, uninterrupted run %.0f ms\n",
              kills, during_write, starts, runs, ref_ms);
  RecordProperty("kills", kills);
  RecordProperty("kills_during_checkpoint_write", during_write);
}

TEST(Durability, FullDiskFailsTheCheckpointAndKeepsThePreviousOne) {
  const TempDir tmp("durability");
  const std::string data = make_data(), dir = tmp.path, run = dir + "/run", log = dir + "/log.txt";
  const std::string config = write_config(dir, tiny_config(60));
  int status = wait_for(
      spawn_aah({"train", "--data", data, "--out", run, "--config", config, "--quiet", "--stop-after", "3"}, log));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(log);
  ASSERT_EQ(checkpoint_verify(run), 3);
  const std::string model_before = read_file(run + "/model.safetensors");

  // 16 KiB per file (as `ulimit -f 16`, SIGXFSZ left at its default): config.json and metrics.jsonl fit,
  // model.safetensors does not.
  status = wait_for(spawn_aah({"train", "--data", data, "--out", run, "--resume", "--quiet", "--stop-after", "6"}, log,
                              0, 16384, /*ignore_xfsz=*/false));
  const std::string msg = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << exit_str(status);
  EXPECT_NE(WEXITSTATUS(status), 0) << msg;
  const std::vector<std::string> parts = {"model.safetensors", std::strerror(EFBIG),
                                          "checkpoint of step 6 was not written", "the run keeps " + run + "/ckpt-3"};
  for (const std::string& part : parts)
    EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;

  EXPECT_EQ(checkpoint_verify(run), 3);  // intact, checksums verify
  EXPECT_TRUE(read_file(run + "/model.safetensors") == model_before);
  EXPECT_FALSE(has_checkpoint_leftovers(run));
  // With room again, the run continues from step 3.
  status =
      wait_for(spawn_aah({"train", "--data", data, "--out", run, "--resume", "--quiet", "--stop-after", "6"}, log));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(log);
  EXPECT_EQ(checkpoint_verify(run), 6);
}

// The controller trace under a file-size limit: a clean error naming the trace file, not a signal, not a short trace
// and exit 0.
TEST(Durability, TraceWriteBeyondAFileSizeLimitIsAnError) {
  const TempDir tmp("durability");
  const std::string data = make_data(), dir = tmp.path, run = dir + "/run", log = dir + "/log.txt";
  const std::string config = write_config(dir, tiny_config(20));
  const std::string trace = dir + "/trace.jsonl";
  const int status = wait_for(spawn_aah({"train", "--data", data, "--out", run, "--config", config, "--quiet",
                                         "--trace-controller", trace, "--set", "aah.regime=full_adaptive", "--set",
                                         "aah.control_interval=1"},
                                        log, 0, 8192, /*ignore_xfsz=*/false));
  const std::string msg = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << exit_str(status) << ": " << msg;
  EXPECT_NE(WEXITSTATUS(status), 0) << msg;
  EXPECT_NE(msg.find("[trace] " + trace + ": write failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ulimit -f"), std::string::npos) << msg;
}

TEST(Durability, SigtermCheckpointsAndExits143) {
  const TempDir tmp("durability");
  const std::string data = make_data(), dir = tmp.path, run = dir + "/run", log = dir + "/log.txt";
  const std::string config = write_config(dir, tiny_config(100000));
  const pid_t pid = spawn_aah({"train", "--data", data, "--out", run, "--config", config, "--quiet"}, log);
  // Wait until it trains (a metrics line), so the handler is installed.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(file_exists(run + "/metrics.jsonl") && !read_file(run + "/metrics.jsonl").empty()) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGTERM);
  const int status = wait_for(pid);
  const std::string msg = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << exit_str(status) << ": " << msg;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << msg;
  EXPECT_NE(msg.find("stopped by signal 15"), std::string::npos) << msg;
  const int step = checkpoint_verify(run);
  ASSERT_GT(step, 0);
  const std::string stop = std::to_string(step + 2);
  const int resumed =
      wait_for(spawn_aah({"train", "--data", data, "--out", run, "--resume", "--quiet", "--stop-after", stop}, log));
  ASSERT_TRUE(WIFEXITED(resumed) && WEXITSTATUS(resumed) == 0) << read_file(log);
  EXPECT_EQ(checkpoint_verify(run), step + 2);
}

// Runs `aah train --data <tiny data> --quiet ARGS` to its end in a child process.
struct Outcome {
  int code;         // exit code, or 128 + signal
  std::string out;  // stdout and stderr
};
Outcome train(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {"train", "--data", make_data(), "--quiet"};
  all.insert(all.end(), args.begin(), args.end());
  const int status = wait_for(spawn_aah(all, log));
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_file(log)};
}

TEST(Durability, CorruptCheckpointIsAnErrorNamingTheFile) {
  const TempDir tmp("durability");
  const std::string run = tmp.path + "/run", log = tmp.path + "/log.txt";
  Outcome r = train({"--out", run, "--config", write_config(tmp.path, tiny_config(4)), "--stop-after", "2"}, log);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(checkpoint_verify(run), 2);
  // Flip one bit of the weights' data, in place.
  const std::string path = checkpoint_dir(run) + "/model.safetensors";
  std::string bytes = read_file(path);
  bytes[bytes.size() - 3] ^= 0x04;
  {
    std::ofstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  const std::string msg = error_of([&] { checkpoint_verify(run); });
  for (const char* part : {"model.safetensors", "corrupt", "expected crc32c:", "got crc32c:"})
    EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
  r = train({"--out", run, "--resume"}, log);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(path + ": corrupt"), std::string::npos) << r.out;
}

TEST(Durability, NonFiniteWeightsAreNeverCheckpointed) {
  const TempDir tmp("durability");
  const std::string run = tmp.path + "/run", log = tmp.path + "/log.txt";
  Outcome r = train({"--out", run, "--config", write_config(tmp.path, tiny_config(10)), "--stop-after", "2"}, log);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string model_before = read_file(run + "/model.safetensors");
  // An infinite learning rate makes the weights infinite at step 3, checkpointed at once.
  r = train({"--out", run, "--resume", "--set", "train.lr=1e39", "--set", "train.checkpoint_interval=1"}, log);
  EXPECT_EQ(r.code, 1);
  const std::vector<std::string> parts = {"checkpoint of step 3 was not written", "the run keeps " + run + "/ckpt-2",
                                          "model.safetensors", "non-finite"};
  for (const std::string& part : parts)
    EXPECT_NE(r.out.find(part), std::string::npos) << "missing '" << part << "' in: " << r.out;
  EXPECT_EQ(checkpoint_verify(run), 2);
  EXPECT_TRUE(read_file(run + "/model.safetensors") == model_before);
  EXPECT_FALSE(has_checkpoint_leftovers(run));
}

TEST(Durability, LossSpikesAreLogged) {
  const TempDir tmp("durability");
  const std::string run = tmp.path + "/run", log = tmp.path + "/log.txt";
  Outcome r = train({"--out", run, "--config", write_config(tmp.path, tiny_config(14)), "--stop-after", "10"}, log);
  ASSERT_EQ(r.code, 0) << r.out;
  // A learning rate far too high from step 11 on: the loss jumps well above its running mean.
  r = train({"--out", run, "--resume", "--set", "train.lr=10"}, log);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("loss spike"), std::string::npos) << r.out;
  int spikes = 0;
  for (const auto& j : metrics_without_timing(run)) {
    if (j.value("event", "") != "loss_spike") continue;
    spikes++;
    EXPECT_GT(j["step"].get<int>(), 10);
    EXPECT_GT(j["loss"].get<double>(), 3.0 * j["mean"].get<double>());  // the default train.spike_factor
  }
  EXPECT_GE(spikes, 1);
}

// Runs written before checkpoints were directories (the four files at the top level) still resume, and move to the
// new layout at their next checkpoint.
TEST(Durability, OlderRunLayoutStillResumes) {
  const TempDir tmp("durability");
  const std::string run = tmp.path + "/run", log = tmp.path + "/log.txt";
  Outcome r = train({"--out", run, "--config", write_config(tmp.path, tiny_config(4)), "--stop-after", "2"}, log);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string ckpt = checkpoint_dir(run);
  for (const char* f : kCheckpointFiles) {
    const std::string bytes = read_file(run + "/" + f);
    remove_tree(run + "/" + f);
    write_file_atomic(run + "/" + f, bytes);
  }
  remove_tree(run + "/checkpoint");
  remove_tree(ckpt);
  ASSERT_EQ(checkpoint_dir(run), run);
  ASSERT_EQ(checkpoint_verify(run), 2);
  r = train({"--out", run, "--resume"}, log);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_link(run + "/checkpoint"), "ckpt-4");
  EXPECT_EQ(read_link(run + "/model.safetensors"), "checkpoint/model.safetensors");
  EXPECT_EQ(checkpoint_verify(run), 4);
}

}  // namespace
}  // namespace aah
