#include "train/train.h"

#include <unistd.h>

#include <csignal>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "controller/controller.h"
#include "core/check.h"
#include "core/rng.h"
#include "core/sys.h"
#include "dist/comm.h"
#include "eval/eval.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/shard.h"
#include "model/model.h"
#include "model/weights.h"
#include "model/window_policy.h"
#include "train/grad_sync.h"
#include "train/optimizer.h"

namespace aah {

namespace {

using json = nlohmann::json;

// SIGINT / SIGTERM ask the loop to stop after the current step, with a checkpoint.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

struct TrainState {
  int step = 0;  // optimizer steps completed
  Rng rng;       // data sampling
  int64_t tokens_seen = 0;
};

bool is_checkpoint_step(const TrainConfig& t, int step) {
  if (step == t.steps) return true;
  if (t.checkpoint_interval > 0 && step % t.checkpoint_interval == 0) return true;
  for (int s : t.checkpoint_steps)
    if (s == step) return true;
  return false;
}

void save_checkpoint(const std::string& dir, const Config& cfg, Model<float>& model, const AdamW& opt,
                     const TrainState& st, const WindowPolicyRunner& policy) {
  const std::string step = std::to_string(st.step);
  write_file_atomic(dir + "/config.json", config_to_json(cfg).dump(2) + "\n");
  weights_save(dir + "/model.safetensors", model, {{"format", "pt"}, {"step", step}});
  SafetensorsWriter w;
  const int64_t n = int64_t(opt.m.size());
  w.add_f32("adamw.m", opt.m.data(), {n});
  w.add_f32("adamw.v", opt.v.data(), {n});
  int64_t scalars[3] = {st.step, opt.t, st.tokens_seen};
  w.add_raw("counters", "I64", scalars, sizeof scalars, {3});  // step, adam t, tokens seen
  w.add_raw("rng", "I64", st.rng.s, sizeof st.rng.s, {4});
  w.set_metadata("step", step);
  w.write(dir + "/training_state.safetensors");
  // The window policy's state, so a resumed run decides exactly as an uninterrupted one.
  SafetensorsWriter cw;
  policy.save(cw);
  cw.set_metadata("step", step);
  cw.set_metadata("regime", cfg.aah.regime);
  cw.write(dir + "/controller_state.safetensors");
}

void load_checkpoint(const std::string& dir, Model<float>& model, AdamW& opt, TrainState& st,
                     WindowPolicyRunner& policy) {
  auto meta = weights_load(dir + "/model.safetensors", model);
  const std::string path = dir + "/training_state.safetensors";
  SafetensorsReader r(path);
  const int64_t n = int64_t(opt.m.size());
  r.read_f32("adamw.m", opt.m.data(), {n});
  r.read_f32("adamw.v", opt.v.data(), {n});
  int64_t scalars[3];
  r.read_raw("counters", "I64", scalars, {3});
  r.read_raw("rng", "I64", st.rng.s, {4});
  st.step = int(scalars[0]);
  opt.t = scalars[1];
  st.tokens_seen = scalars[2];
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

// Multiply-adds the attention kernels execute for one layer's forward + backward with every window full, on
// this shape: the denominator of the measured attention work ratio. The count depends only on shapes and windows,
// so one run on zeros, at start-up, is enough.
uint64_t full_attention_macs(const ModelConfig& m, int B, int T, bool dense) {
  const int H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim;
  const size_t nq = size_t(B) * H * T * D, nk = size_t(B) * Hkv * T * D;
  std::vector<float> q(nq), o(nq), dout(nq), dq(nq), lse(size_t(B) * H * T), k(nk), v(nk), dk(nk), dv(nk);
  std::vector<int> windows(H, T);
  AttnCounters c;
  if (dense) {
    cpu::attn_dense_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), windows.data(), B, H, Hkv, T, D,
                            nullptr, &c);
    cpu::attn_dense_backward(dq.data(), dk.data(), dv.data(), dout.data(), o.data(), lse.data(), q.data(), k.data(),
                             v.data(), windows.data(), B, H, Hkv, T, D, &c);
  } else {
    cpu::attn_local_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), windows.data(), B, H, Hkv, T, D,
                            nullptr, &c);
    cpu::attn_local_backward(dq.data(), dk.data(), dv.data(), dout.data(), o.data(), lse.data(), q.data(), k.data(),
                             v.data(), windows.data(), B, H, Hkv, T, D, &c);
  }
  return c.macs;
}

// Before rank 0 writes a checkpoint: every rank must hold the same parameters and windows (their all-reduced
// gradients and combined features make them so); a difference is a bug, stopped here rather than saved.
void check_ranks_agree(Comm& comm, Model<float>& model, int step) {
  const std::vector<int>& w = model.windows();
  double mine[2] = {double(comm_fingerprint(model.params_data(), model.num_params() * sizeof(float)) >> 12),
                    double(comm_fingerprint(w.data(), w.size() * sizeof(int)) >> 12)};
  std::vector<double> all(size_t(2) * comm.size());
  comm.allgather(mine, 2, all.data());
  for (int r = 1; r < comm.size(); r++)
    if (all[size_t(2) * r] != all[0] || all[size_t(2) * r + 1] != all[1])
      fail("[train] step ", step, ": rank ", r, " holds different ", all[size_t(2) * r] != all[0] ? "parameters" : "windows",
           " than rank 0 (data-parallel ranks diverged); the last checkpoint is kept");
}

bool run_dir_has_results(const std::string& dir) {
  for (const char* f : {"config.json", "model.safetensors", "training_state.safetensors", "controller_state.safetensors",
                        "metrics.jsonl"})
    if (file_exists(dir + "/" + f)) return true;
  return false;
}

}  // namespace

int train_run(const TrainOptions& o) {
  Comm& comm = comm_world();  // data-parallel ranks (1 without mpirun)
  const int ranks = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;  // writes the run directory, metrics and progress
  const bool quiet = o.quiet || !lead;
  Config cfg = o.config;
  if (o.resume) {
    cfg = run_config_load(o.out_dir);
    if (!file_exists(o.out_dir + "/training_state.safetensors"))
      fail("[train] --resume ", o.out_dir, ": no checkpoint yet (training_state.safetensors missing)");
  } else if (run_dir_has_results(o.out_dir) && !o.force) {
    fail("[train] ", o.out_dir, " already holds a run: use --resume to continue it or --force to overwrite it");
  }
  for (const auto& s : o.sets) config_set(cfg, s);
  config_validate(cfg);
  const ModelConfig& mc = cfg.model;
  const TrainConfig& tc = cfg.train;

  TokenShard train = shard_read(o.data_dir + "/train.bin");
  TokenShard val = shard_read(o.data_dir + "/val.bin");
  for (const TokenShard* s : {&train, &val})
    if (int64_t(s->vocab_size) > mc.vocab_size)
      fail("[train] ", s->path, " has vocabulary ", s->vocab_size, " but the model's vocab_size is ", mc.vocab_size,
           ": --set vocab_size=", s->vocab_size);
  const int B = tc.batch_size, T = tc.context;
  if (B % ranks != 0)
    fail("[train] train.batch_size=", B, " does not split over ", ranks, " processes: use a number of processes ",
         "that divides it (the global batch stays batch_size, each process runs batch_size / processes)");
  if (o.allreduce != "overlap" && o.allreduce != "blocking")
    fail("[train] --allreduce ", o.allreduce, ": expected overlap or blocking");
  const int Bl = B / ranks, b_first = rank * Bl;  // this rank's slice of every micro-batch
  if (int64_t(train.tokens.size()) < T + 1)
    fail("[train] ", train.path, " has ", train.tokens.size(), " tokens; train.context=", T, " needs at least ", T + 1);

  // Refuse a configuration that cannot fit, before allocating anything: model, gradients and activations, AdamW
  // moments, and the token shards already read.
  const double need = double(Model<float>::estimate_bytes(mc, Bl, T)) +
                      2.0 * sizeof(float) * double(Model<float>::estimate_bytes(mc, 0, 0, false) / sizeof(float));
  const double have = double(available_memory_bytes());
  if (have > 0 && need > 0.9 * have)
    fail("[train] this configuration needs about ", int64_t(need / 1048576), " MiB but ", int64_t(have / 1048576),
         " MiB are available: lower train.batch_size (raise train.grad_accum to keep the batch), train.context, ",
         "hidden_size or num_hidden_layers");
  comm.barrier();  // every rank has checked the run directory before rank 0 writes into it
  if (lead) make_dirs(o.out_dir);
  Model<float> model(mc, Bl, T);
  model.dense_attention = cfg.aah.attention == "dense";
  AdamW opt;
  opt.init(model);

  WindowPolicyRunner policy(cfg, model);
  if (ranks > 1) policy.set_comm(&comm);
  if (!o.trace_file.empty() && lead) policy.open_trace(o.trace_file, o.resume);  // global features and decisions
  GradSync grad_sync(comm, model, o.allreduce == "overlap");
  const Controller& controller = policy.controller();
  TrainState st;
  st.rng.reseed(uint64_t(tc.seed) ^ 0x5eed0da7aull);
  if (o.resume) {
    load_checkpoint(o.out_dir, model, opt, st, policy);
    if (st.step >= tc.steps) {
      if (lead) std::fprintf(stderr, "[train] %s: already at step %d of %d\n", o.out_dir.c_str(), st.step, tc.steps);
      return 0;
    }
    if (lead) truncate_metrics(o.out_dir + "/metrics.jsonl", st.step);
    if (!quiet) std::fprintf(stderr, "[train] resuming %s at step %d\n", o.out_dir.c_str(), st.step);
  } else {
    model.init_weights(uint64_t(tc.seed));
  }
  if (!o.resume && lead) {
    write_file_atomic(o.out_dir + "/metrics.jsonl", "");
    write_file_atomic(o.out_dir + "/config.json", config_to_json(cfg).dump(2) + "\n");
    // The run directory is self-contained (HF layout): the data's tokenizer goes with the model.
    if (file_exists(o.data_dir + "/tokenizer.json"))
      write_file_atomic(o.out_dir + "/tokenizer.json", read_file(o.data_dir + "/tokenizer.json"));
  }
  if (!quiet)
    std::fprintf(stderr, "[train] %.2fM parameters, %d layers, batch %d x %d x %d accum, %d steps, %d threads\n",
                 model.num_params() / 1e6, mc.num_hidden_layers, B, T, tc.grad_accum, tc.steps, num_threads());
  if (!quiet && ranks > 1)
    std::fprintf(stderr, "[train] data-parallel over %d processes (%s): %d sequences each, %s all-reduce\n", ranks,
                 comm.backend().c_str(), Bl, o.allreduce.c_str());

  const double full_macs_per_step =
      double(full_attention_macs(mc, Bl, T, model.dense_attention)) * mc.num_hidden_layers * tc.grad_accum;
  uint64_t macs_at_log = model.counters.macs;
  std::FILE* metrics = lead ? std::fopen((o.out_dir + "/metrics.jsonl").c_str(), "a") : nullptr;
  if (lead && !metrics) fail("[train] cannot open ", o.out_dir, "/metrics.jsonl for appending");
  if (!lead) metrics = std::fopen("/dev/null", "w");  // the other ranks log nowhere
  std::vector<int32_t> inp(size_t(Bl) * T), tgt(size_t(Bl) * T);
  const int64_t max_start = int64_t(train.tokens.size()) - T - 1;
  const float grad_scale = 1.0f / float(B * T * tc.grad_accum);
  const int64_t tokens_per_step = int64_t(B) * T * tc.grad_accum;
  const double t_start = now_seconds();
  double t_log = t_start;
  int steps_since_log = 0, first_step = st.step;
  double loss_acc = 0;
  int loss_count = 0;
  int exit_code = 0;
  double comm_at_log = comm.seconds;

  g_stop_signal = 0;
  auto old_int = std::signal(SIGINT, on_stop_signal), old_term = std::signal(SIGTERM, on_stop_signal);
  while (st.step < tc.steps) {
    model.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < tc.grad_accum; micro++) {
      // Every rank draws the whole batch (one RNG stream, as one process would) and keeps its slice.
      for (int b = 0; b < B; b++) {
        const int64_t s = int64_t(st.rng.below(uint64_t(max_start + 1)));
        if (b < b_first || b >= b_first + Bl) continue;
        std::copy_n(train.tokens.data() + s, T, inp.data() + size_t(b - b_first) * T);
        std::copy_n(train.tokens.data() + s + 1, T, tgt.data() + size_t(b - b_first) * T);
      }
      policy.begin_forward(st.step, /*update=*/micro == 0);  // a control update runs in the first micro-batch only
      loss += model.forward(inp.data(), tgt.data(), Bl, T, 1.0f) / tc.grad_accum * (double(Bl) / B);
      policy.end_forward();
      grad_sync.before_backward(micro == tc.grad_accum - 1);
      model.backward(inp.data(), Bl, T);
    }
    grad_sync.finish();  // every rank now holds the whole batch's gradient sum
    int stop_signal = g_stop_signal;
    if (ranks > 1) {  // the batch's loss, and whether any rank was asked to stop (all stop at the same step)
      double x[2] = {loss, double(stop_signal)};
      comm.allreduce_sum(x, 2);
      loss = x[0];
      stop_signal = int(x[1]) != 0 ? (g_stop_signal ? int(g_stop_signal) : SIGTERM) : 0;
    }
    // Gradients were accumulated unscaled (dlogits x 1); scale once here: mean over all tokens of the step.
    const double raw_norm = global_norm(model.grads_data(), model.num_params());
    const double grad_norm = raw_norm * grad_scale;
    const double lr = lr_at(tc, st.step);
    st.tokens_seen += tokens_per_step;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      if (lead)
        std::fprintf(stderr, "\n[train] step %d: non-finite %s (loss %g, grad norm %g): %s\n", st.step + 1,
                   std::isfinite(loss) ? "gradient" : "loss", loss, grad_norm,
                   tc.nonfinite == "stop" ? "stopping" : "step skipped");
      std::fprintf(metrics, "%s\n",
                   json({{"step", st.step + 1}, {"event", "nonfinite"}, {"loss", std::isfinite(loss) ? loss : -1.0},
                         {"skipped", tc.nonfinite != "stop"}})
                       .dump()
                       .c_str());
      if (tc.nonfinite == "stop") {
        exit_code = 3;
        break;
      }
    } else {
      float scale = grad_scale;
      if (tc.grad_clip > 0 && grad_norm > tc.grad_clip) scale = float(grad_scale * tc.grad_clip / grad_norm);
      opt.update(model.params_data(), model.grads_data(), model.num_params(), lr, tc, scale);
      loss_acc += loss;
      loss_count++;
    }
    st.step++;
    steps_since_log++;

    const bool last = st.step == tc.steps;
    const bool eval_now = last || (tc.eval_interval > 0 && st.step % tc.eval_interval == 0);
    if (st.step % tc.log_interval == 0 || last || eval_now) {
      const double now = now_seconds();
      const double tok_s = steps_since_log * tokens_per_step / std::max(1e-9, now - t_log);
      const double elapsed = now - t_start;
      const double eta = elapsed / std::max(1, st.step - first_step) * (tc.steps - st.step);
      json line = {{"step", st.step},
                   {"loss", loss_count ? loss_acc / loss_count : NAN},
                   {"lr", lr},
                   {"grad_norm", grad_norm},
                   {"tokens_per_s", tok_s},
                   {"peak_rss_mb", peak_rss_mb()},
                   {"tokens", st.tokens_seen},
                   {"elapsed_s", elapsed},
                   {"attn_ratio", controller.acr()},
                   {"pair_ratio", controller.exact_pair_ratio(T)},
                   {"levels_used", controller.mean_levels_used()},
                   {"attn_work_ratio", double(model.counters.macs - macs_at_log) /
                                           (full_macs_per_step * std::max(1, steps_since_log))}};
      if (ranks > 1) {  // communication time per step (all-reduces, feature combination) and its share of the step
        const double comm_s = comm.seconds - comm_at_log;
        line["ranks"] = ranks;
        line["allreduce_ms"] = 1e3 * comm_s / std::max(1, steps_since_log);
        line["allreduce_share"] = comm_s / std::max(1e-9, now - t_log);
      }
      json buckets = json::object();
      for (auto [w, f] : controller.window_bucket_fractions()) buckets[std::to_string(w)] = f;
      line["window_fractions"] = buckets;
      if (eval_now) {
        // Evaluation batches are split over the ranks; the loss is the sum over all of them.
        const EvalResult ev = eval_loss(model, val.tokens, T, tc.eval_windows, Bl, {}, rank, ranks);
        double sums[2] = {ev.loss_sum, double(ev.tokens)};
        comm.allreduce_sum(sums, 2);
        line["val_loss"] = sums[0] / sums[1];
        line["val_ppl"] = std::exp(sums[0] / sums[1]);
      }
      std::fprintf(metrics, "%s\n", line.dump().c_str());
      std::fflush(metrics);
      if (!quiet) {
        std::fprintf(stderr, "step %*d/%d | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | ETA %s", int(std::to_string(tc.steps).size()),
                     st.step, tc.steps, loss_count ? loss_acc / loss_count : NAN, lr, grad_norm, tok_s,
                     format_duration(eta).c_str());
        if (eval_now) std::fprintf(stderr, " | val %.4f", line["val_loss"].get<double>());
        std::fprintf(stderr, "\n");
      }
      t_log = now_seconds();  // evaluation time (and work) is not training time
      macs_at_log = model.counters.macs;
      comm_at_log = comm.seconds;
      steps_since_log = 0;
      loss_acc = 0;
      loss_count = 0;
    }
    if (ranks == 1) stop_signal = g_stop_signal;  // one process: a signal that came during logging counts now
    const bool stop_now = (o.stop_after > 0 && st.step == o.stop_after) || stop_signal != 0;
    if (is_checkpoint_step(tc, st.step) || stop_now) {
      if (ranks > 1) check_ranks_agree(comm, model, st.step);
      if (lead) save_checkpoint(o.out_dir, cfg, model, opt, st, policy);
    }
    if (stop_now) {
      if (stop_signal) {
        if (!quiet)
          std::fprintf(stderr, "\n[train] %s: stopped by signal %d after step %d; checkpoint written, continue with "
                       "--resume\n", o.out_dir.c_str(), stop_signal, st.step);
        exit_code = 128 + stop_signal;
      }
      break;
    }
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  std::fclose(metrics);
  if (!quiet && exit_code == 0)
    std::fprintf(stderr, "[train] done: %s (%s, peak %.0f MB)\n", o.out_dir.c_str(),
                 format_duration(now_seconds() - t_start).c_str(), peak_rss_mb());
  return exit_code;
}

}  // namespace aah
