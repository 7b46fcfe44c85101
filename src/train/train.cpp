#include "train/train.h"

#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <cstring>
#include <fstream>

#include "controller/controller.h"
#include "controller/copy_use.h"
#include "core/check.h"
#include "kernels/bf16/bf16.h"
#include "core/rng.h"
#include "core/sys.h"
#include "dist/comm.h"
#include "eval/eval.h"
#include "eval/probe.h"
#include "formats/checksum.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/shard.h"
#include "model/engine.h"
#include "model/model.h"
#include "model/weights.h"
#include "model/attention_work.h"
#include "model/window_policy.h"
#include "train/checkpoint.h"
#include "train/grad_sync.h"
#include "train/optimizer.h"
#include "train/run_data.h"

namespace aah {

namespace {

using json = nlohmann::json;

// SIGINT / SIGTERM ask the loop to stop after the current step, with a checkpoint.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

// Installs the stop handlers for its lifetime (restored on every exit path, errors included).
struct StopSignals {
  using Handler = void (*)(int);
  Handler old_int, old_term;
  StopSignals() {
    g_stop_signal = 0;
    old_int = std::signal(SIGINT, on_stop_signal);
    old_term = std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

// Appends lines to metrics.jsonl, each flushed; a failed write (a full disk) is an error naming the file.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "a")) {
    if (!f_) fail("[train] ", path_, ": cannot open for appending: ", std::strerror(errno));
  }
  ~MetricsLog() {
    if (f_) std::fclose(f_);
  }
  void write(const nlohmann::json& line) {
    const std::string text = line.dump() + "\n";
    if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fflush(f_) != 0)
      fail("[train] ", path_, ": write failed: ", std::strerror(errno),
           errno == EFBIG ? " (a file-size limit: ulimit -f)" : "");
  }
  void close() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail("[train] ", path_, ": close failed: ", std::strerror(errno));
  }

 private:
  std::string path_;
  std::FILE* f_;
};

// Running mean of the step loss for loss-spike events: an EMA with this decay (about the last 20 steps).
constexpr double kLossEmaDecay = 0.95;

struct TrainState {
  int step = 0;  // optimizer steps completed
  Rng rng;       // data sampling
  int64_t tokens_seen = 0;
  double loss_ema = 0;     // running mean of the step loss (finite steps only)
  int64_t loss_steps = 0;  // steps in loss_ema
  // What the next metrics line averages, accumulated since the last one. Checkpointed, so that a run resumed
  // between two lines logs the same values as an uninterrupted one.
  double log_loss_sum = 0;     // losses of the updated steps
  int64_t log_loss_count = 0;  // updated steps
  int64_t log_steps = 0;       // steps
  double log_macs = 0;         // attention multiply-adds
};

bool is_checkpoint_step(const TrainConfig& t, int step) {
  if (step == t.steps) return true;
  if (t.checkpoint_interval > 0 && step % t.checkpoint_interval == 0) return true;
  for (int s : t.checkpoint_steps)
    if (s == step) return true;
  return false;
}

// Writes the checkpoint of st.step as one unit (see checkpoint.h). Non-finite weights or AdamW moments are refused
// (the error names the tensor); on any error the run keeps its previous checkpoint.
void save_checkpoint(const std::string& run, const Config& cfg, Model<float>& model, const AdamW& opt,
                     const TrainState& st, const WindowPolicyRunner& policy) {
  const std::string step = std::to_string(st.step);
  auto write_files = [&](const std::string& dir) {
    write_file_atomic(dir + "/config.json", config_to_json(cfg).dump(2) + "\n");
    checkpoint_test_delay();
    weights_save(dir + "/model.safetensors", model, {{"format", "pt"}, {"step", step}});
    checkpoint_test_delay();
    SafetensorsWriter w;
    w.require_finite();
    const int64_t n = int64_t(opt.m.size);
    const HostCopy<float> m(opt.backend->memory, opt.m.data, n), v(opt.backend->memory, opt.v.data, n);
    w.add_f32("adamw.m", m.data(), {n});
    w.add_f32("adamw.v", v.data(), {n});
    int64_t scalars[3] = {st.step, opt.t, st.tokens_seen};
    w.add_raw("counters", "I64", scalars, sizeof scalars, {3});  // step, adam t, tokens seen
    w.add_raw("rng", "I64", st.rng.s, sizeof st.rng.s, {4});
    double loss_ema[2] = {st.loss_ema, double(st.loss_steps)};
    w.add_raw("loss_ema", "F64", loss_ema, sizeof loss_ema, {2});  // running mean, steps in it
    double log_window[4] = {st.log_loss_sum, double(st.log_loss_count), double(st.log_steps), st.log_macs};
    w.add_raw("log_window", "F64", log_window, sizeof log_window, {4});  // since the last metrics line
    w.set_metadata("step", step);
    w.write(dir + "/training_state.safetensors");
    checkpoint_test_delay();
    // The window policy's state, so a resumed run decides exactly as an uninterrupted one.
    SafetensorsWriter cw;
    policy.save(cw);
    cw.set_metadata("step", step);
    cw.set_metadata("regime", cfg.aah.regime);
    cw.write(dir + "/controller_state.safetensors");
    checkpoint_test_delay();
  };
  try {
    checkpoint_commit(run, st.step, write_files);
  } catch (const Error& e) {
    const std::string kept = checkpoint_dir(run);
    fail("[checkpoint] ", run, ": the checkpoint of step ", st.step, " was not written (",
         kept.empty() ? std::string("there is no earlier one") : "the run keeps " + kept, "): ", e.what());
  }
}

// Loads the checkpoint in `dir` (RUN/ckpt-N; checksums verified by the readers) and checks its files agree.
void load_checkpoint(const std::string& dir, Model<float>& model, AdamW& opt, TrainState& st,
                     WindowPolicyRunner& policy) {
  auto meta = weights_load(dir + "/model.safetensors", model);
  const std::string path = dir + "/training_state.safetensors";
  SafetensorsReader r(path);
  const int64_t n = int64_t(opt.m.size);
  HostStage<float> m(opt.backend->memory, opt.m.data, n), v(opt.backend->memory, opt.v.data, n);
  r.read_f32("adamw.m", m.data(), {n});
  r.read_f32("adamw.v", v.data(), {n});
  m.commit(), v.commit();
  int64_t scalars[3];
  r.read_raw("counters", "I64", scalars, {3});
  r.read_raw("rng", "I64", st.rng.s, {4});
  st.step = int(scalars[0]);
  opt.t = scalars[1];
  st.tokens_seen = scalars[2];
  if (r.has("loss_ema")) {  // absent in checkpoints written before loss-spike events: the mean starts afresh
    double loss_ema[2];
    r.read_raw("loss_ema", "F64", loss_ema, {2});
    st.loss_ema = loss_ema[0];
    st.loss_steps = int64_t(loss_ema[1]);
  }
  if (r.has("log_window")) {  // absent in older checkpoints: the first line after resume averages from there
    double log_window[4];
    r.read_raw("log_window", "F64", log_window, {4});
    st.log_loss_sum = log_window[0];
    st.log_loss_count = int64_t(log_window[1]);
    st.log_steps = int64_t(log_window[2]);
    st.log_macs = log_window[3];
  }
  if (meta.count("step") && meta["step"] != std::to_string(st.step))
    fail("[checkpoint] ", dir, ": model.safetensors is from step ", meta["step"], " but training_state from step ",
         st.step);
  SafetensorsReader cr(dir + "/controller_state.safetensors");
  policy.load(cr);
  if (cr.metadata().count("step") && cr.metadata().at("step") != std::to_string(st.step))
    fail("[checkpoint] ", dir, ": controller_state.safetensors is from step ", cr.metadata().at("step"),
         " but training_state from step ", st.step);
}

// Keeps metrics lines up to `step` (a resumed run rewrites what came after its checkpoint).
void truncate_metrics(const std::string& path, int step) {
  if (!file_exists(path)) return;
  std::ifstream f(path);
  std::string line, kept;
  while (std::getline(f, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int>() <= step)
      kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

// Before rank 0 writes a checkpoint: every rank must hold the same parameters and windows (their all-reduced
// gradients and combined features make them so); a difference is a bug, stopped here rather than saved.
void check_ranks_agree(Comm& comm, Model<float>& model, int step) {
  const std::vector<int>& w = model.windows();
  const HostCopy<float> params(model.backend->memory, model.params_data(), model.num_params());
  double mine[2] = {double(comm_fingerprint(params.data(), model.num_params() * sizeof(float)) >> 12),
                    double(comm_fingerprint(w.data(), w.size() * sizeof(int)) >> 12)};
  std::vector<double> all(size_t(2) * comm.size());
  comm.allgather(mine, 2, all.data());
  for (int r = 1; r < comm.size(); r++)
    if (all[size_t(2) * r] != all[0] || all[size_t(2) * r + 1] != all[1])
      fail("[train] step ", step, ": rank ", r, " holds different ", all[size_t(2) * r] != all[0] ? "parameters" : "windows",
           " than rank 0 (data-parallel ranks diverged); the last checkpoint is kept");
}

// One optimizer step's tokens: micro_batches micro-batches of this rank's B sequences of T tokens each.
struct Batch {
  int micro_batches = 0, B = 0, T = 0;
  int B_all = 0;                         // sequences per micro-batch over all ranks (train.batch_size)
  std::vector<int32_t> inputs, targets;  // (micro_batches, B, T); targets are the inputs shifted by one token
  const int32_t* input(int micro) const { return inputs.data() + size_t(micro) * B * T; }
  const int32_t* target(int micro) const { return targets.data() + size_t(micro) * B * T; }
};

// Draws a step's batch at random positions of `tokens`. Every rank draws the whole batch (one RNG stream, as one
// process would) and keeps its slice: sequences b_first .. b_first + B - 1 of each micro-batch.
void batch_draw(Batch& batch, Rng& rng, const std::vector<int32_t>& tokens, int b_first) {
  const int T = batch.T;
  const int64_t max_start = int64_t(tokens.size()) - T - 1;
  for (int micro = 0; micro < batch.micro_batches; micro++)
    for (int b = 0; b < batch.B_all; b++) {
      const int64_t s = int64_t(rng.below(uint64_t(max_start + 1)));
      if (b < b_first || b >= b_first + batch.B) continue;
      const size_t row = (size_t(micro) * batch.B + (b - b_first)) * T;
      std::copy_n(tokens.data() + s, T, batch.inputs.data() + row);
      std::copy_n(tokens.data() + s + 1, T, batch.targets.data() + row);
    }
}

struct StepResult {
  double loss = 0;       // mean over the step's tokens (all ranks)
  double grad_norm = 0;  // of the step's mean gradient, before clipping
  bool updated = false;  // false: the loss or the gradient was not finite, and the update was skipped
  int stop_signal = 0;   // a stop signal any rank had received by the all-reduce (all stop at the same step)
};

// One optimizer step, as llm.c's: forward and backward of each micro-batch (gradients accumulate), all-reduce,
// clip, update. Gradients are zeroed before the first forward, which already accumulates the LM head's.
StepResult train_step(Model<float>& model, AdamW& opt, const Batch& batch, WindowPolicyRunner& policy,
                      GradSync& grad_sync, Comm& comm, int step, double lr, const TrainConfig& tc) {
  StepResult r;
  model.zero_grads();
  for (int micro = 0; micro < batch.micro_batches; micro++) {
    policy.begin_forward(step, /*update=*/micro == 0);  // a control update runs in the first micro-batch only
    if (micro > 0) model.keep_rounded_weights();        // bf16: the weights are rounded once per step
    const double loss = model.forward(batch.input(micro), batch.target(micro), batch.B, batch.T, 1.0f);
    r.loss += loss / batch.micro_batches * (double(batch.B) / batch.B_all);
    policy.end_forward();
    grad_sync.before_backward(micro == batch.micro_batches - 1);
    model.backward(batch.input(micro), batch.B, batch.T);
  }

  grad_sync.finish();  // all-reduce: every rank now holds the whole batch's gradient sum
  r.stop_signal = g_stop_signal;
  if (comm.size() > 1) {  // the batch's loss, and whether any rank was asked to stop, in one all-reduce
    double x[2] = {r.loss, double(r.stop_signal)};
    comm.allreduce_sum(x, 2);
    r.loss = x[0];
    r.stop_signal = int(x[1]) != 0 ? (g_stop_signal ? int(g_stop_signal) : SIGTERM) : 0;
  }

  // Gradients were accumulated unscaled (dlogits x 1); scale once here: mean over all tokens of the step.
  const float grad_scale = 1.0f / float(batch.B_all * batch.T * batch.micro_batches);
  r.grad_norm = global_norm(*model.backend, model.grads_data(), model.num_params()) * grad_scale;
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) return r;  // no update; the caller decides
  float scale = grad_scale;  // clip
  if (tc.grad_clip > 0 && r.grad_norm > tc.grad_clip) scale = float(grad_scale * tc.grad_clip / r.grad_norm);

  opt.update(model.params_data(), model.grads_data(), model.num_params(), lr, tc, scale);
  r.updated = true;
  return r;
}

// Policy oracle (a control): the windows the base's per-head cut probe says lose the least retrieval under the
// whole model's pair budget (the copy policy's exact solver on the answer-loss increases), set before step 0 and
// kept; the table and the choice go to oracle.json.
void oracle_windows_set(const Config& cfg, const TokenShard& val, const std::string& out_dir, bool lead,
                        WindowPolicyRunner& policy) {
  if (cfg.train.init_from.empty())
    fail("[train] policy oracle (regime ", cfg.aah.regime, ") cuts the heads of a trained base: set train.init_from");
  const RetrievalCutTable t = retrieval_cut_table(cfg, cfg.train.init_from, val);
  const int N = cfg.model.num_hidden_layers * cfg.model.num_attention_heads;
  const double budget = controller_config_of(cfg).pair_budget;
  const std::vector<int> c = copy_budget_choice(t.loss_increase.data(), N, t.windows, budget);
  std::vector<int> windows(static_cast<size_t>(N));
  for (int n = 0; n < N; n++) windows[size_t(n)] = t.windows[size_t(c[size_t(n)])];
  policy.set_model_windows(windows);
  if (lead) write_file_atomic(out_dir + "/oracle.json", retrieval_cut_table_json(t, windows).dump(1) + "\n");
}

// train.init_from: the weights of another run (or a Hugging Face Qwen3 directory) as the starting point; the
// optimizer, the step and the windows start fresh. The model shapes must agree key by key.
void init_from_dir(const std::string& dir, const ModelConfig& mc, Model<float>& model) {
  if (!dir_exists(dir))
    fail("[train] train.init_from=", dir, ": ", path_exists(dir) ? "not a directory" : "no such directory");
  const ModelConfig from = run_config_load(dir).model;
  auto same = [&](const char* key, double a, double b) {
    if (a != b)
      fail("[train] train.init_from=", dir, ": its model has ", key, "=", a, " but this run's has ", b,
           " (", dir, "/config.json)");
  };
  same("hidden_size", from.hidden_size, mc.hidden_size);
  same("intermediate_size", from.intermediate_size, mc.intermediate_size);
  same("num_hidden_layers", from.num_hidden_layers, mc.num_hidden_layers);
  same("num_attention_heads", from.num_attention_heads, mc.num_attention_heads);
  same("num_key_value_heads", from.num_key_value_heads, mc.num_key_value_heads);
  same("head_dim", from.head_dim, mc.head_dim);
  same("vocab_size", from.vocab_size, mc.vocab_size);
  same("rope_theta", from.rope_theta, mc.rope_theta);
  same("rms_norm_eps", from.rms_norm_eps, mc.rms_norm_eps);
  same("tie_word_embeddings", from.tie_word_embeddings, mc.tie_word_embeddings);
  same("aah.qk_norm", from.qk_norm, mc.qk_norm);
  weights_load_dir(dir, model);
}

// The run's data directory: --data, or on --resume the one the run recorded (it must still be there).
std::string train_data_dir(const TrainOptions& o, const std::optional<RunData>& recorded) {
  std::string data_dir = o.data_dir;
  if (data_dir.empty()) {
    if (!o.resume) fail("[train] --data DIR is required (only --resume does without it: it uses the run's data)");
    if (!recorded)
      fail("[train] --resume ", o.out_dir, ": the run does not record its data directory (no data.json: it was ",
           "started by an older aah): give --data DIR");
    data_dir = recorded->dir;
    if (!dir_exists(data_dir))
      fail("[train] --resume ", o.out_dir, ": the run's data directory ", data_dir, " (recorded in ", o.out_dir,
           "/data.json) is gone: give --data DIR with the same tokenizer");
  } else if (!dir_exists(data_dir)) {
    fail("[train] --data ", data_dir, ": ", path_exists(data_dir) ? "not a directory" : "no such directory");
  }
  return data_dir;
}

// Refuses what cannot train, before anything is allocated: a vocabulary smaller than the data's, a batch that does
// not split over the ranks, too few tokens for one sequence, more memory than there is (model, gradients and
// activations, AdamW moments, and the token shards already read).
void train_check_setup(const Config& cfg, const RunData& data, const std::string& data_dir, const TokenShard& train,
                       const TokenShard& val, int ranks, const std::string& allreduce) {
  const ModelConfig& mc = cfg.model;
  if (data.vocab_size > mc.vocab_size)
    fail("[train] vocab_size = ", mc.vocab_size, " is smaller than the vocabulary of ", data_dir, " (", data.vocab_size,
         ", from its ", data.vocab_from, "): the model needs a row for every token id; set vocab_size >= ",
         data.vocab_size, " or leave it unset to take the data's");
  for (const TokenShard* s : {&train, &val})
    if (int64_t(s->vocab_size) > mc.vocab_size)
      fail("[train] ", s->path, " has vocabulary ", s->vocab_size, " but the model's vocab_size is ", mc.vocab_size,
           ": --set vocab_size=", s->vocab_size);
  const int B = cfg.train.batch_size, T = cfg.train.context;
  if (B % ranks != 0)
    fail("[train] train.batch_size=", B, " does not split over ", ranks, " processes: use a number of processes ",
         "that divides it (the global batch stays batch_size, each process runs batch_size / processes)");
  if (allreduce != "overlap" && allreduce != "blocking")
    fail("[train] --allreduce ", allreduce, ": expected overlap or blocking");
  if (int64_t(train.tokens.size()) < T + 1)
    fail("[train] ", train.path, " has ", train.tokens.size(), " tokens; train.context=", T, " needs at least ", T + 1);
  const double need = double(Model<float>::estimate_bytes(mc, B / ranks, T, true, cfg.train.precision == "bf16")) +
                      2.0 * sizeof(float) * double(Model<float>::estimate_bytes(mc, 0, 0, false) / sizeof(float));
  const double have = double(available_memory_bytes());
  if (have > 0 && need > 0.9 * have)
    fail("[train] this configuration needs about ", int64_t(need / 1048576), " MiB but ", int64_t(have / 1048576),
         " MiB are available: lower train.batch_size (raise train.grad_accum to keep the batch), train.context, ",
         "hidden_size or num_hidden_layers");
}

// What every metrics line of a run reads besides the step's own numbers.
struct LineSources {
  const Model<float>& model;
  const WindowPolicyRunner& policy;
  const Comm& comm;
  int T;
  int64_t tokens_per_step;
  double full_macs_per_step;  // attention multiply-adds of one step at full windows
};

// Where the next metrics line starts from: the previous line's time, the steps since, and the attention work,
// communication and measurement-time counters then (this process's own time only).
struct LogMarks {
  double t = 0;
  int steps = 0;
  uint64_t macs = 0;
  double comm = 0, coverage = 0;
  void reset(double now, const LineSources& src) {
    t = now, steps = 0, macs = src.model.counters.macs, comm = src.comm.seconds;
    coverage = src.policy.coverage_seconds();
  }
};

// One metrics.jsonl line for the steps since `m`: loss, throughput, attention work and windows; with several ranks
// the communication time per step and its share, under a measuring policy (coverage, copy) its time and share.
json metrics_line(const LineSources& src, const TrainState& st, const LogMarks& m, double now, double elapsed,
                  double lr, double grad_norm) {
  const Controller& controller = src.policy.controller();
  const double span = std::max(1e-9, now - m.t);
  json line = {{"step", st.step},
               {"loss", st.log_loss_count ? st.log_loss_sum / double(st.log_loss_count) : NAN},
               {"lr", lr},
               {"grad_norm", grad_norm},
               {"tokens_per_s", m.steps * src.tokens_per_step / span},
               {"peak_rss_mb", peak_rss_mb()},
               {"tokens", st.tokens_seen},
               {"elapsed_s", elapsed},
               {"attn_ratio", controller.acr()},
               {"pair_ratio", controller.exact_pair_ratio(src.T)},
               {"levels_used", controller.mean_levels_used()},
               {"attn_work_ratio", (st.log_macs + double(src.model.counters.macs - m.macs)) /
                                       (src.full_macs_per_step * double(std::max<int64_t>(1, st.log_steps)))}};
  if (src.comm.size() > 1) {
    const double comm_s = src.comm.seconds - m.comm;
    line["ranks"] = src.comm.size();
    line["allreduce_ms"] = 1e3 * comm_s / std::max(1, m.steps);
    line["allreduce_share"] = comm_s / span;
  }
  if (controller.needs_mass() || controller.needs_copy_use()) {
    const double cov_s = src.policy.coverage_seconds() - m.coverage;
    line["coverage_ms"] = 1e3 * cov_s / std::max(1, m.steps);
    line["coverage_time_share"] = cov_s / span;
  }
  json buckets = json::object();
  for (auto [w, f] : controller.window_bucket_fractions()) buckets[std::to_string(w)] = f;
  line["window_fractions"] = buckets;
  return line;
}

// Rank 0 owns the run directory: creates it, takes its lock (held in `lock` for the run) and removes what an
// interrupted run left.
void train_dir_take(const TrainOptions& o, bool quiet, std::optional<RunLock>& lock) {
  const bool created = !path_exists(o.out_dir);
  make_dirs(o.out_dir);
  lock.emplace(o.out_dir, created);
  const std::vector<std::string> leftovers = checkpoint_clean(o.out_dir);
  if (!leftovers.empty() && !quiet) {
    std::string names;
    for (const std::string& n : leftovers) names += " " + n;
    std::fprintf(stderr, "[train] %s: removed what an interrupted run left:%s\n", o.out_dir.c_str(), names.c_str());
  }
}

// The run's config against its data (on --resume: the same vocabulary and tokenizer as the data it was trained on;
// otherwise, with vocab_from_data, the data's vocabulary), then --set, validated.
void train_config_settle(const TrainOptions& o, const std::optional<RunData>& recorded, const RunData& data,
                         Config& cfg) {
  if (o.resume) {
    RunData trained;  // a run without data.json: its copy of the data's tokenizer.json (if any) is the record
    if (recorded)
      trained = *recorded;
    else if (path_exists(o.out_dir + "/tokenizer.json"))
      trained.tokenizer_sha256 = sha256_hex(read_file(o.out_dir + "/tokenizer.json"));
    run_data_check(trained, data, o.out_dir);
  } else if (o.vocab_from_data) {
    cfg.model.vocab_size = int(std::min<int64_t>(data.vocab_size, INT32_MAX));  // --set vocab_size=N still wins
  }
  for (const auto& s : o.sets) config_set(cfg, s);
  config_validate(cfg);
}

// Where training starts: on --resume the checkpoint (false: the run is already at its last step, nothing to do);
// otherwise train.init_from's weights, if set, and the policy oracle's windows.
bool train_resume_or_start(const TrainOptions& o, const Config& cfg, const TokenShard& val, Model<float>& model,
                           AdamW& opt, TrainState& st, WindowPolicyRunner& policy, bool lead, bool quiet) {
  const TrainConfig& tc = cfg.train;
  if (o.resume) {
    load_checkpoint(checkpoint_dir(o.out_dir), model, opt, st, policy);
    if (st.step >= tc.steps) {
      if (lead) std::fprintf(stderr, "[train] %s: already at step %d of %d\n", o.out_dir.c_str(), st.step, tc.steps);
      return false;
    }
    if (lead) truncate_metrics(o.out_dir + "/metrics.jsonl", st.step);
    if (!quiet) std::fprintf(stderr, "[train] resuming %s at step %d\n", o.out_dir.c_str(), st.step);
  } else {
    if (!tc.init_from.empty()) {
      init_from_dir(tc.init_from, cfg.model, model);
      if (!quiet) std::fprintf(stderr, "[train] starting from the weights of %s\n", tc.init_from.c_str());
    }
    if (policy.controller().config().policy == WindowPolicy::oracle)
      oracle_windows_set(cfg, val, o.out_dir, lead, policy);
  }
  return true;
}

// A fresh run's files: empty metrics, its config, and (the run directory is self-contained, HF layout) the data's
// tokenizer with the model. The previous run's checkpoint (--force) goes first.
void train_write_run_files(const TrainOptions& o, const Config& cfg, const std::string& data_dir) {
  checkpoint_remove(o.out_dir);
  write_file_atomic(o.out_dir + "/metrics.jsonl", "");
  write_file_atomic(o.out_dir + "/config.json", config_to_json(cfg).dump(2) + "\n");
  if (file_exists(data_dir + "/tokenizer.json"))
    write_file_atomic(o.out_dir + "/tokenizer.json", read_file(data_dir + "/tokenizer.json"));
}

// The training loop of a run that train_run has set up: draws a batch, steps, records the step, logs (and
// evaluates) every log_interval / eval_interval steps, checkpoints, until train.steps, a stop signal or --stop-after.
class TrainLoop {
 public:
  TrainLoop(const TrainOptions& o, const Config& cfg, Comm& comm, Engine& engine, AdamW& opt, GradSync& grad_sync,
            TrainState& st, const TokenShard& train, const TokenShard& val)
      : o_(o),
        cfg_(cfg),
        tc_(cfg.train),
        comm_(comm),
        model_(engine.model),
        policy_(*engine.policy),
        opt_(opt),
        grad_sync_(grad_sync),
        st_(st),
        train_(train),
        val_(val),
        ranks_(comm.size()),
        rank_(comm.rank()),
        lead_(rank_ == 0),
        quiet_(o.quiet || !lead_),
        T_(tc_.context),
        Bl_(tc_.batch_size / ranks_),
        metrics_(lead_ ? o.out_dir + "/metrics.jsonl" : "/dev/null"),  // the other ranks log nowhere
        tokens_per_step_(int64_t(tc_.batch_size) * T_ * tc_.grad_accum),
        t_start_(now_seconds()),
        first_step_(st.step),
        sources_{model_,
                 policy_,
                 comm_,
                 T_,
                 tokens_per_step_,
                 double(full_window_attention_macs(cfg.model, T_, *model_.backend, /*backward=*/true)) * Bl_ *
                     cfg.model.num_hidden_layers * tc_.grad_accum} {
    batch_.micro_batches = tc_.grad_accum, batch_.B = Bl_, batch_.T = T_, batch_.B_all = tc_.batch_size;
    batch_.inputs.resize(size_t(tc_.grad_accum) * Bl_ * T_);
    batch_.targets.resize(batch_.inputs.size());
    marks_.reset(t_start_, sources_);
  }

  // The run's exit code: 0, 3 (a non-finite step under train.nonfinite=stop) or 128 + a stop signal.
  int run() {
    int exit_code = 0;
    StopSignals stop_signals;
    while (st_.step < tc_.steps) {
      batch_draw(batch_, st_.rng, train_.tokens, rank_ * Bl_);
      const double lr = lr_at(tc_, st_.step);
      const StepResult r = train_step(model_, opt_, batch_, policy_, grad_sync_, comm_, st_.step, lr, tc_);
      thread_count_recheck();  // cores that came free (or were taken) since start; the bits do not depend on it
      int stop_signal = r.stop_signal;
      st_.tokens_seen += tokens_per_step_;
      if (!record_step(r)) {
        exit_code = 3;
        break;
      }
      st_.step++;
      st_.log_steps++;
      marks_.steps++;

      const bool last = st_.step == tc_.steps;
      const bool eval_now = last || (tc_.eval_interval > 0 && st_.step % tc_.eval_interval == 0);
      if (st_.step % tc_.log_interval == 0 || last || eval_now) log(lr, r.grad_norm, eval_now);
      if (ranks_ == 1) stop_signal = g_stop_signal;  // one process: a signal that came during logging counts now
      const bool stop_now = (o_.stop_after > 0 && st_.step == o_.stop_after) || stop_signal != 0;
      if (is_checkpoint_step(tc_, st_.step) || stop_now) checkpoint();
      if (stop_now) {
        if (stop_signal) {
          if (lead_)  // even with --quiet: the user must know the run stopped and how to continue it
            std::fprintf(stderr,
                         "\n[train] %s: stopped by signal %d after step %d; checkpoint written, continue with "
                         "--resume\n",
                         o_.out_dir.c_str(), stop_signal, st_.step);
          exit_code = 128 + stop_signal;
        }
        break;
      }
    }
    metrics_.close();
    if (!quiet_ && exit_code == 0)
      std::fprintf(stderr, "[train] done: %s (%s, peak %.0f MB)\n", o_.out_dir.c_str(),
                   format_duration(now_seconds() - t_start_).c_str(), peak_rss_mb());
    return exit_code;
  }

 private:
  // A step's loss into the state: a non-finite step is logged as an event (false: train.nonfinite=stop ends the
  // run); a finite one is averaged into the next metrics line, and one far above the running mean is logged.
  bool record_step(const StepResult& r) {
    const double loss = r.loss, grad_norm = r.grad_norm;
    if (!r.updated) {
      if (lead_)
        std::fprintf(stderr, "\n[train] step %d: non-finite %s (loss %g, grad norm %g): %s\n", st_.step + 1,
                     std::isfinite(loss) ? "gradient" : "loss", loss, grad_norm,
                     tc_.nonfinite == "stop" ? "stopping" : "step skipped");
      metrics_.write({{"step", st_.step + 1},
                      {"event", "nonfinite"},
                      {"loss", std::isfinite(loss) ? loss : -1.0},
                      {"skipped", tc_.nonfinite != "stop"}});
      return tc_.nonfinite != "stop";
    }
    st_.log_loss_sum += loss;
    st_.log_loss_count++;
    // A loss far above its running mean is logged (the step is kept): an early sign of divergence.
    if (tc_.spike_factor > 0 && st_.loss_steps > 0 && loss > tc_.spike_factor * st_.loss_ema) {
      std::fprintf(stderr, "[train] step %d: loss spike: %.4f is %.1fx the running mean %.4f\n", st_.step + 1, loss,
                   loss / st_.loss_ema, st_.loss_ema);
      metrics_.write({{"step", st_.step + 1}, {"event", "loss_spike"}, {"loss", loss}, {"mean", st_.loss_ema}});
    }
    st_.loss_ema = st_.loss_steps == 0 ? loss : kLossEmaDecay * st_.loss_ema + (1 - kLossEmaDecay) * loss;
    st_.loss_steps++;
    return true;
  }

  // One metrics line (with the validation loss when eval_now) and the progress line; then the next line's marks.
  void log(double lr, double grad_norm, bool eval_now) {
    const double now = now_seconds();
    const double elapsed = now - t_start_;
    const double eta = elapsed / std::max(1, st_.step - first_step_) * (tc_.steps - st_.step);
    json line = metrics_line(sources_, st_, marks_, now, elapsed, lr, grad_norm);
    if (eval_now) {
      // Evaluation batches are split over the ranks; the loss is the sum over all of them.
      const EvalResult ev = eval_loss(model_, val_.tokens, T_, tc_.eval_windows, Bl_, {}, rank_, ranks_);
      double sums[2] = {ev.loss_sum, double(ev.tokens)};
      comm_.allreduce_sum(sums, 2);
      line["val_loss"] = sums[0] / sums[1];
      line["val_ppl"] = std::exp(sums[0] / sums[1]);
    }
    metrics_.write(line);
    if (!quiet_) {
      std::fprintf(stderr, "step %*d/%d | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | ETA %s",
                   int(std::to_string(tc_.steps).size()), st_.step, tc_.steps, line["loss"].get<double>(), lr,
                   grad_norm, line["tokens_per_s"].get<double>(), format_duration(eta).c_str());
      if (eval_now) std::fprintf(stderr, " | val %.4f", line["val_loss"].get<double>());
      std::fprintf(stderr, "\n");
    }
    marks_.reset(now_seconds(), sources_);  // evaluation time (and work) is not training time
    st_.log_loss_sum = 0, st_.log_loss_count = 0, st_.log_steps = 0, st_.log_macs = 0;
  }

  // A checkpoint (rank 0 writes it, after the ranks are checked to agree), with the attention work since the last
  // metrics line carried in it.
  void checkpoint() {
    if (ranks_ > 1) check_ranks_agree(comm_, model_, st_.step);
    st_.log_macs += double(model_.counters.macs - marks_.macs);  // carried in the checkpoint
    marks_.macs = model_.counters.macs;
    if (lead_) save_checkpoint(o_.out_dir, cfg_, model_, opt_, st_, policy_);
  }

  const TrainOptions& o_;
  const Config& cfg_;
  const TrainConfig& tc_;
  Comm& comm_;
  Model<float>& model_;
  WindowPolicyRunner& policy_;
  AdamW& opt_;
  GradSync& grad_sync_;
  TrainState& st_;
  const TokenShard& train_;
  const TokenShard& val_;
  const int ranks_, rank_;
  const bool lead_, quiet_;
  const int T_, Bl_;  // context, this rank's sequences per micro-batch
  MetricsLog metrics_;
  Batch batch_;
  const int64_t tokens_per_step_;
  const double t_start_;
  const int first_step_;
  const LineSources sources_;
  LogMarks marks_;
};

}  // namespace

int checkpoint_verify(const std::string& run) {
  const std::string dir = checkpoint_dir(run);
  if (dir.empty()) return -1;
  const Config cfg = run_config_load(dir);
  Engine engine(cfg, EngineOptions(1, cfg.train.context).training());
  AdamW opt;
  opt.init(engine.model);
  TrainState st;
  load_checkpoint(dir, engine.model, opt, st, *engine.policy);
  return st.step;
}

int train_run(const TrainOptions& o) {
  Comm& comm = comm_world();  // data-parallel ranks (1 without mpirun)
  const int ranks = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;  // writes the run directory, metrics and progress
  const bool quiet = o.quiet || !lead;
  Config cfg = o.config;
  run_dir_check(o.out_dir, o.resume, o.force);
  comm.barrier();  // every rank has seen the directory as it was before rank 0 writes into it
  // The data: --data, or on --resume the directory the run recorded (checked before anything is created).
  std::optional<RunData> recorded;
  if (o.resume) recorded = run_data_load(o.out_dir);
  const std::string data_dir = train_data_dir(o, recorded);
  std::optional<RunLock> lock;  // rank 0 owns the run directory
  if (lead) train_dir_take(o, quiet, lock);
  comm.barrier();  // the others read the checkpoint only after rank 0 has cleaned the directory
  if (o.resume) {
    const std::string dir = checkpoint_dir(o.out_dir);
    if (dir.empty())
      fail("[train] --resume ", o.out_dir, ": no checkpoint yet (", o.out_dir, "/checkpoint is missing)");
    cfg = run_config_load(dir);
  }
  TokenShard train = shard_read(data_dir + "/train.bin");
  TokenShard val = shard_read(data_dir + "/val.bin");
  const RunData data = run_data_of(data_dir, std::max(train.vocab_size, val.vocab_size));
  train_config_settle(o, recorded, data, cfg);
  const ModelConfig& mc = cfg.model;
  const TrainConfig& tc = cfg.train;

  train_check_setup(cfg, data, data_dir, train, val, ranks, o.allreduce);
  const int B = tc.batch_size, T = tc.context;
  const int Bl = B / ranks;  // this rank's slice of every micro-batch
  comm.barrier();  // every rank has checked the run directory before training starts
  Engine engine(cfg, EngineOptions(Bl, T).training());  // weights from train.seed, replaced below
  Model<float>& model = engine.model;                                      // on --resume or with train.init_from
  WindowPolicyRunner& policy = *engine.policy;
  AdamW opt;
  opt.init(model);
  if (ranks > 1) policy.set_comm(&comm);
  if (!o.trace_file.empty() && lead) policy.open_trace(o.trace_file, o.resume);  // global features and decisions
  GradSync grad_sync(comm, model, o.allreduce == "overlap");
  TrainState st;
  st.rng.reseed(uint64_t(tc.seed) ^ 0x5eed0da7aull);
  if (!train_resume_or_start(o, cfg, val, model, opt, st, policy, lead, quiet)) return 0;
  if (!o.resume && lead) train_write_run_files(o, cfg, data_dir);
  // Where the data is, for a --resume without --data; a resume from a moved copy records the new place.
  if (lead && (!o.resume || !recorded || recorded->dir != data.dir)) run_data_save(o.out_dir, data);
  if (!quiet)
    std::fprintf(stderr, "[train] %.2fM parameters, %d layers, batch %d x %d x %d accum, %d steps, %d threads\n",
                 model.num_params() / 1e6, mc.num_hidden_layers, B, T, tc.grad_accum, tc.steps, num_threads());
  if (!quiet && model.backend->bf16) {
    const bf16::AttnKernel kernel = bf16::attn_kernel(mc.head_dim);
    const std::string attention =
        std::string(model.backend->name) != "local-bf16" ? "attention in fp32 (dense)"
        : kernel != bf16::AttnKernel::fp32
            ? str_cat("attention's products in bf16 ", bf16::attn_kernel_how(kernel), " (fp32 on control updates)")
            : "attention in fp32 (bf16 attention needs AVX-512 BF16 and a head dim that is a multiple of 32)";
    std::fprintf(stderr,
                 "[train] train.precision=bf16: matrix products in bf16 on oneDNN (%s), fp32 accumulation, "
                 "weights, optimizer, norms, softmax and loss; %s\n",
                 bf16::isa().c_str(), attention.c_str());
    if (const std::string warning = bf16::slow_product_warning(bf16::product_rates()); !warning.empty())
      std::fprintf(stderr, "[train] warning: %s\n", warning.c_str());
  }
  if (!quiet && ranks > 1)
    std::fprintf(stderr, "[train] data-parallel over %d processes (%s): %d sequences each, %s all-reduce\n", ranks,
                 comm.backend().c_str(), Bl, o.allreduce.c_str());
  TrainLoop loop(o, cfg, comm, engine, opt, grad_sync, st, train, val);
  return loop.run();
}

}  // namespace aah
