#include "bench/bench_train.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/attention_common.h"
#include "kernels/bf16/bf16.h"
#include "experiments/presets.h"
#include "core/sys.h"
#include "model/model.h"
#include "model/window_policy.h"
#include "train/optimizer.h"

namespace aah {

MeasureCase SgemmBench::make_case() const {
  struct Buffers {
    std::vector<float> a, b, c;
  };
  auto buf = std::make_shared<Buffers>();
  buf->a.assign(size_t(M) * K, 0.5f);
  buf->b.assign(size_t(N) * K, 0.25f);
  buf->c.assign(size_t(M) * N, 0.0f);
  const SgemmBench g = *this;
  return {"sgemm", [buf, g] {
            for (int r = 0; r < g.repeats; r++)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.M, g.N, g.K, 1.0f, buf->a.data(), g.K,
                          buf->b.data(), g.K, 0.0f, buf->c.data(), g.N);
          }};
}

MeasureCase Bf16GemmBench::make_case() const {
  struct Buffers {
    std::vector<uint16_t> a, b;
    std::vector<float> c;
  };
  auto buf = std::make_shared<Buffers>();
  buf->a.assign(size_t(M) * K, bf16::round(0.5f));
  buf->b.assign(size_t(N) * K, bf16::round(0.25f));
  buf->c.assign(size_t(M) * N, 0.0f);
  const Bf16GemmBench g = *this;
  return {"bf16 product", [buf, g] {
            for (int r = 0; r < g.repeats; r++)
              bf16::gemm_nt(buf->c.data(), buf->a.data(), buf->b.data(), g.M, g.N, g.K);
          }};
}

namespace {
Config with_seed0(Config c) {
  c.train.seed = 0;
  return c;
}
}  // namespace

BenchTrainer::BenchTrainer(const Config& c)
    : cfg(c),
      B(c.train.batch_size),
      T(c.train.context),
      engine(with_seed0(c), EngineOptions(B, T).training().no_policy()),
      model(engine.model),
      tokens(size_t(B) * T + 1) {
  opt.init(model);
  Rng rng(1);
  for (auto& t : tokens) t = int32_t(rng.below(c.model.vocab_size));
}

void BenchTrainer::step() {
  model.zero_grads();
  model.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f);
  model.backward(tokens.data(), B, T);
  const double norm = global_norm(model.grads_data(), model.num_params()) / (B * T);
  opt.update(model.params_data(), model.grads_data(), model.num_params(), 1e-4, cfg.train,
             float(1.0 / (B * T) / std::max(1.0, norm)));
}

void BenchTrainer::forward() { model.forward(tokens.data(), tokens.data() + 1, B, T); }

ModelConfig bench_c_model() {
  ModelConfig m;
  m.hidden_size = 256;
  m.intermediate_size = 704;
  m.num_hidden_layers = 4;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 8;
  m.head_dim = 32;
  m.vocab_size = 8192;
  return m;
}

namespace {

// bench-c at `context` (batch 4096 / context), or a suite preset's model, context and batch.
Config bench_config(const std::string& regime, int context, const std::string& preset) {
  Config cfg;
  config_set(cfg, "aah.regime=" + regime);  // first: a regime clears the aah.* knobs
  if (preset.empty()) {
    cfg.model = bench_c_model();
    cfg.train.context = context;
    cfg.train.batch_size = std::max(1, 4096 / context);
  } else {
    for (const auto& s : suite_preset(preset).sets) config_set(cfg, s);
  }
  config_validate(cfg);
  if (controller_config_of(cfg).policy == WindowPolicy::oracle)
    fail("[bench] regime ", regime, ": policy oracle's windows come from a trained base's cut probe, which a bench ",
         "does not have (a suite with the retrieval preset times its runs' windows)");
  return cfg;
}

// The regime's windows after its warm-up, and what the warm-up measured.
struct RegimeWarmup {
  std::vector<int> windows;  // (L, H) frozen for the timed rounds
  int updates = 0;           // control updates run
  int timed_from = 1;        // the first update timed (at full evidence: Controller::evidence_updates)
  double seconds = 0;        // wall time of the warm-up
  double controller_ms = 0;  // per training step: features + decisions of one update / control interval
  double acr = 1, pair_ratio = 1;
};

// Runs the regime's controller on `model` (forward passes only, on its update steps 0, I, 2I, ...) until its
// windows stop changing: at least 3 updates (the first has no attention diagnostics yet), at most 8. Training
// steps in between would only move the weights a little; the resolution EMA is what needs the updates. A policy
// whose decisions read several updates of evidence (Controller::evidence_updates: copy counted once) runs until it
// holds all of it, and is timed from there on: the cost at steady state, not while its evidence is still small.
RegimeWarmup warm_up_regime(const Config& cfg, Model<float>& model, const std::vector<int32_t>& tokens) {
  const int B = cfg.train.batch_size, T = cfg.train.context;
  const int interval = controller_config_of(cfg).control_interval;
  RegimeWarmup w;
  const double t0 = now_seconds();
  WindowPolicyRunner policy(cfg, model);  // removes itself from the model when it goes out of scope
  const int full_from = policy.controller().evidence_updates();  // the first update at its full evidence
  const int most = std::max(8, full_from + 3);
  std::vector<int> prev = model.windows();
  double untimed_s = 0;  // updates before full_from (the first also builds what later ones reuse)
  int timed = 0;
  w.timed_from = full_from;
  for (int u = 0; u < most; u++) {
    const int step = u * interval;
    if (!policy.controller().is_update_step(step)) break;  // fixed windows, or frozen after its warmup
    policy.begin_forward(step, true);
    model.forward(tokens.data(), tokens.data() + 1, B, T);
    policy.end_forward();
    w.updates++;
    if (u < full_from) untimed_s = policy.seconds();
    else timed++;
    if (u >= std::max(2, full_from + 2) && model.windows() == prev) break;
    prev = model.windows();
  }
  // Counted alone only when it is the only update.
  const double per_update_s = timed > 0 ? (policy.seconds() - untimed_s) / timed : policy.seconds() / w.updates;
  w.controller_ms = per_update_s * 1e3 / interval;
  w.windows = model.windows();
  w.acr = policy.controller().acr();
  w.pair_ratio = policy.controller().exact_pair_ratio(T);
  w.seconds = now_seconds() - t0;
  return w;
}

}  // namespace

std::vector<int> paper_adaptive_mix(int T, int H) {
  const int mix8[8] = {T / 8, T / 8, T / 8, T / 8, T / 4, T / 4, T / 2, T};
  std::vector<int> w(H);
  for (int h = 0; h < H; h++) w[h] = std::max(1, mix8[std::min(7, (2 * h + 1) * 8 / (2 * H))]);
  return w;
}

namespace {

// A window configuration timed against full windows: a regime (warmed up, then frozen) or a fixed set.
struct TrainVariant {
  std::string name;
  std::vector<int> windows;  // (L, H)
  std::optional<RegimeWarmup> warm;
  double pair_ratio = 1, acr = 1, controller_ms = 0;
  std::vector<double> attn;  // attention seconds per call
};

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// " 512 512 1024 4096": the windows of the first layer (every layer has the same).
std::string window_list(const std::vector<int>& windows, int H) {
  std::string s;
  for (int h = 0; h < H && h < int(windows.size()); h++) s += " " + std::to_string(windows[h]);
  return s;
}

double pair_ratio_of(const std::vector<int>& windows, int T) {
  double used = 0;
  for (int w : windows) used += double(attn_visible_pairs(T, w));
  return used / (double(attn_visible_pairs(T, T)) * double(windows.size()));
}

}  // namespace

int bench_train(const BenchOptions& o, const std::string& regime, int context, const std::string& preset,
                const std::vector<std::string>& window_sets, const std::vector<std::string>& precisions) {
  const Config full_cfg = bench_config("full", context, preset);
  const ModelConfig& m = full_cfg.model;
  const int B = full_cfg.train.batch_size, T = full_cfg.train.context;
  const int L = m.num_hidden_layers, H = m.num_attention_heads;
  // One model and optimizer for every configuration: they differ only in the windows in force.
  BenchTrainer bt(full_cfg);
  Model<float>& model = bt.model;
  const std::vector<int32_t>& tokens = bt.tokens;

  std::vector<TrainVariant> variants;
  if (regime != "full") {
    TrainVariant v;
    v.name = regime;
    v.warm = warm_up_regime(bench_config(regime, context, preset), model, tokens);
    v.windows = v.warm->windows, v.pair_ratio = v.warm->pair_ratio, v.acr = v.warm->acr;
    v.controller_ms = v.warm->controller_ms;
    variants.push_back(std::move(v));
  }
  for (const std::string& ws : window_sets) {
    std::vector<int> head;
    if (ws == "mix")
      head = paper_adaptive_mix(T, H);
    else if (ws == "T/8")
      head.assign(H, std::max(1, T / 8));
    else
      fail("bench train: unknown window set '", ws, "' (known: mix, T/8)");
    TrainVariant v;
    v.name = ws == "mix" ? "adaptive mix" : ws;
    for (int l = 0; l < L; l++) v.windows.insert(v.windows.end(), head.begin(), head.end());
    v.pair_ratio = pair_ratio_of(v.windows, T);
    double acr = 0;
    for (int w : v.windows) acr += double(w) / T;
    v.acr = acr / double(v.windows.size());
    variants.push_back(std::move(v));
  }

  // One training step under `windows` (nullptr: full); appends the seconds spent in attention to `attn`.
  auto step_case = [&](const std::vector<int>* windows, std::vector<double>* attn) {
    return [&, windows, attn] {
      if (windows)
        model.windows() = *windows;
      else
        model.set_full_windows(T);
      const double a0 = model.attention_seconds;
      bt.step();
      attn->push_back(model.attention_seconds - a0);
    };
  };
  std::vector<double> attn_full;  // per call, warm-up rounds included (dropped below)
  const SgemmBench sgemm;
  std::vector<MeasureCase> cases = {{"full", step_case(nullptr, &attn_full)}};
  for (TrainVariant& v : variants) cases.push_back({v.name, step_case(&v.windows, &v.attn)});
  cases.push_back(sgemm.make_case());
  const int i_full = 0, i_sgemm = int(cases.size()) - 1;
  MeasureOptions mo = o.measure;
  for (size_t i = 0; i < variants.size(); i++) mo.ratios.push_back({int(i) + 1, i_full});
  mo.ratios.push_back({i_sgemm, i_full});
  // bf16: the same model at train.precision=bf16 (its own weights and optimizer: same seed, same shape), full
  // windows, and oneDNN's bf16 product as its reference rate.
  const bool with_bf16 = std::find(precisions.begin(), precisions.end(), "bf16") != precisions.end();
  std::optional<BenchTrainer> bt16;
  std::vector<double> attn_bf16;
  const Bf16GemmBench bf16_gemm;
  int i_bf16 = -1, i_bf16_gemm = -1;
  if (with_bf16) {
    Config c16 = full_cfg;
    c16.train.precision = "bf16";
    bt16.emplace(c16);
    i_bf16 = int(cases.size());
    cases.push_back({"full bf16", [&] {
                       bt16->model.set_full_windows(T);
                       const double a0 = bt16->model.attention_seconds;
                       bt16->step();
                       attn_bf16.push_back(bt16->model.attention_seconds - a0);
                     }});
    i_bf16_gemm = int(cases.size());
    cases.push_back(bf16_gemm.make_case());
    mo.ratios.push_back({i_full, i_bf16});
    mo.ratios.push_back({i_bf16_gemm, i_bf16});
  }
  const MeasureResult res = measure_interleaved(cases, mo);
  const double lim = res.spread_limit;
  attn_full.erase(attn_full.begin(), attn_full.begin() + res.warmup_rounds);
  for (TrainVariant& v : variants) v.attn.erase(v.attn.begin(), v.attn.begin() + res.warmup_rounds);

  // Model FLOPs per token: 6 x (matmul parameters) + attention: QK^T and PV are 2 x 2 x D flops per visible
  // pair forward, twice that backward; causal pairs average (T + 1) / 2 per query.
  const double C = m.hidden_size, D = m.head_dim;
  const double matmul_params =
      L * (C * (H + 2 * m.num_key_value_heads) * D + C * H * D + 3 * C * m.intermediate_size) +
      double(m.vocab_size) * C;
  const double flops_per_token = 6 * matmul_params + 3 * L * H * 4 * D * (T + 1) / 2.0;
  const double tokens_per_step = double(B) * T;
  const SampleStats& full = res.cases[i_full];
  const SampleStats full_ms = scaled(full, 1e3), attn_full_ms = scaled(sample_stats(attn_full, lim), 1e3);
  const SampleStats tok_s = rate_stats(full, tokens_per_step, lim);
  const SampleStats gflops = scaled(rate_stats(full, flops_per_token * tokens_per_step, lim), 1e-9);
  const SampleStats sgemm_gflops = scaled(rate_stats(res.cases[i_sgemm], sgemm.flops(), lim), 1e-9);
  // model GFLOP/s over sgemm GFLOP/s, per round: (model flops / t_step) / (sgemm flops / t_sgemm)
  const SampleStats sgemm_share =
      scaled(ratio_stats(res, i_sgemm, i_full), flops_per_token * tokens_per_step / sgemm.flops());
  const double peak_rss = peak_rss_mb();
  const bool ss = o.samples;
  auto measured = [&](nlohmann::json& row) {
    row["rounds"] = res.rounds;
    row["warmup_rounds"] = res.warmup_rounds;
    row["settled"] = res.settled;
    row["measure_seconds"] = res.seconds;
    row["threads"] = num_threads();
  };
  const std::string config_name = preset.empty() ? "bench-c" : "preset " + preset;
  nlohmann::json row = {{"config", config_name},
                        {"regime", "full"},
                        {"context", T},
                        {"batch", B},
                        {"tokens_per_s", tok_s.median},
                        {"ms_per_step", full_ms.median},
                        {"attention_ms", attn_full_ms.median},
                        {"attention_share", attn_full_ms.median / full_ms.median},
                        {"model_gflops", gflops.median},
                        {"sgemm_gflops", sgemm_gflops.median},
                        {"sgemm_share", sgemm_share.median},
                        {"peak_rss_mb", peak_rss},
                        {"steps_timed", res.rounds}};
  measured(row);
  row["stats"] = {{"ms_per_step", stats_json(full_ms, ss)},
                  {"tokens_per_s", stats_json(tok_s, ss)},
                  {"attention_ms", stats_json(attn_full_ms, ss)},
                  {"sgemm_gflops", stats_json(sgemm_gflops, ss)},
                  {"sgemm_share", stats_json(sgemm_share, ss)}};
  row["flagged"] = full_ms.flagged || sgemm_share.flagged;
  bool any_flag = row["flagged"].get<bool>();
  std::vector<nlohmann::json> rows = {row};
  std::vector<std::string> lines;

  for (size_t vi = 0; vi < variants.size(); vi++) {
    const TrainVariant& v = variants[vi];
    const int ic = int(vi) + 1;
    // The variant's step: the timed step under its windows plus its controller's update cost, amortised. The
    // prediction from skipped work: full's step minus full's attention time times the share of pairs skipped.
    std::vector<double> with_ctrl = res.cases[ic].samples, expected = full.samples;
    for (double& t : with_ctrl) t += v.controller_ms / 1e3;
    for (size_t i = 0; i < expected.size(); i++) expected[i] -= attn_full[i] * (1 - v.pair_ratio);
    const SampleStats reg = sample_stats(with_ctrl, lim);
    const SampleStats reg_ms = scaled(reg, 1e3), reg_tok_s = rate_stats(reg, tokens_per_step, lim);
    const SampleStats attn_reg_ms = scaled(sample_stats(v.attn, lim), 1e3);
    const SampleStats time_ratio = ratio_stats(with_ctrl, full.samples, lim);
    const SampleStats attn_ratio = ratio_stats(v.attn, attn_full, lim);
    const SampleStats expected_ms = scaled(sample_stats(expected, lim), 1e3);
    const SampleStats vs_expected = ratio_stats(with_ctrl, expected, lim);  // measured / predicted, per round
    nlohmann::json r = {{"config", config_name},
                        {"regime", v.name},
                        {"context", T},
                        {"batch", B},
                        {"tokens_per_s", reg_tok_s.median},
                        {"ms_per_step", reg_ms.median},
                        {"attention_ms", attn_reg_ms.median},
                        {"controller_ms", v.controller_ms},
                        {"controller_share", v.controller_ms / reg_ms.median},
                        {"attn_ratio", v.acr},
                        {"pair_ratio", v.pair_ratio},
                        {"time_ratio", time_ratio.median},
                        {"attention_time_ratio", attn_ratio.median},
                        {"expected_ms_per_step", expected_ms.median},
                        {"time_vs_expected", vs_expected.median},
                        {"windows", v.windows},
                        {"peak_rss_mb", peak_rss}};
    if (v.warm)
      r["warmup_updates"] = v.warm->updates, r["warmup_seconds"] = v.warm->seconds,
      r["controller_timed_from_update"] = v.warm->timed_from + 1;
    measured(r);
    r["stats"] = {{"ms_per_step", stats_json(reg_ms, ss)},
                  {"tokens_per_s", stats_json(reg_tok_s, ss)},
                  {"attention_ms", stats_json(attn_reg_ms, ss)},
                  {"time_ratio", stats_json(time_ratio, ss)},
                  {"attention_time_ratio", stats_json(attn_ratio, ss)},
                  {"expected_ms_per_step", stats_json(expected_ms, ss)},
                  {"time_vs_expected", stats_json(vs_expected, ss)}};
    r["flagged"] = reg_ms.flagged || time_ratio.flagged;
    any_flag = any_flag || reg_ms.flagged || time_ratio.flagged || attn_ratio.flagged || vs_expected.flagged;
    rows.push_back(r);
    std::string text;
    if (v.warm)
      text += str_cat("  ", v.name, ": warm-up ", v.warm->updates, " control update", v.warm->updates == 1 ? "" : "s",
                      " (forward only, ", fmt(v.warm->seconds, 1), " s), then windows frozen: ACR ", fmt(v.acr, 4),
                      ", exact pair ratio ", fmt(v.pair_ratio, 4), "\n");
    else
      text += str_cat("  ", v.name, " (fixed windows per layer:", window_list(v.windows, H), "): ACR ", fmt(v.acr, 4),
                      ", exact pair ratio ", fmt(v.pair_ratio, 4), "\n");
    text += str_cat("    ", fmt(reg_tok_s.median, 0), " tokens/s, ms/step ", stats_text(reg_ms, 1), ", attention ",
                    fmt(attn_reg_ms.median, 1), " ms/step");
    if (v.warm)
      text += str_cat(", controller ", fmt(v.controller_ms, 2), " ms/step = ",
                      fmt(100 * v.controller_ms / reg_ms.median, 2),
                      "% (amortised over its interval, measured in the warm-up",
                      v.warm->timed_from > 1 ? str_cat(" from update ", v.warm->timed_from + 1, ", at full evidence") : "",
                      ")");
    text += str_cat("\n    step time ratio vs full ", stats_text(time_ratio, 3), ", attention time ratio ",
                    stats_text(attn_ratio, 3), "\n    expected from the skipped attention work: ",
                    fmt(expected_ms.median, 1), " ms/step; measured / expected ", stats_text(vs_expected, 3), "\n");
    lines.push_back(text);
  }
  if (with_bf16) {
    attn_bf16.erase(attn_bf16.begin(), attn_bf16.begin() + res.warmup_rounds);
    const SampleStats& s16 = res.cases[i_bf16];
    const SampleStats ms16 = scaled(s16, 1e3), attn16_ms = scaled(sample_stats(attn_bf16, lim), 1e3);
    const SampleStats tok16 = rate_stats(s16, tokens_per_step, lim);
    const SampleStats gflops16 = scaled(rate_stats(s16, flops_per_token * tokens_per_step, lim), 1e-9);
    const SampleStats limit16 = scaled(rate_stats(res.cases[i_bf16_gemm], bf16_gemm.flops(), lim), 1e-9);
    const SampleStats share16 =
        scaled(ratio_stats(res, i_bf16_gemm, i_bf16), flops_per_token * tokens_per_step / bf16_gemm.flops());
    const SampleStats speedup = ratio_stats(res, i_full, i_bf16);  // fp32 time / bf16 time, per round
    std::string isa;
    bf16::cpu_supported(&isa);
    nlohmann::json r = {{"config", config_name},
                        {"regime", "full"},
                        {"precision", "bf16"},
                        {"isa", isa},
                        {"context", T},
                        {"batch", B},
                        {"tokens_per_s", tok16.median},
                        {"ms_per_step", ms16.median},
                        {"attention_ms", attn16_ms.median},
                        {"attention_share", attn16_ms.median / ms16.median},
                        {"model_gflops", gflops16.median},
                        {"bf16_gemm_gflops", limit16.median},
                        {"bf16_gemm_share", share16.median},
                        {"speedup_vs_fp32", speedup.median},
                        {"peak_rss_mb", peak_rss}};
    measured(r);
    r["stats"] = {{"ms_per_step", stats_json(ms16, ss)},        {"tokens_per_s", stats_json(tok16, ss)},
                  {"attention_ms", stats_json(attn16_ms, ss)},  {"bf16_gemm_gflops", stats_json(limit16, ss)},
                  {"bf16_gemm_share", stats_json(share16, ss)}, {"speedup_vs_fp32", stats_json(speedup, ss)}};
    r["flagged"] = ms16.flagged || speedup.flagged;
    any_flag = any_flag || ms16.flagged || speedup.flagged || share16.flagged;
    rows.push_back(r);
    lines.push_back(str_cat("  full windows, bf16 products (oneDNN, ", isa, "): ", fmt(tok16.median, 0),
                            " tokens/s, ms/step ", stats_text(ms16, 1), ", attention ", fmt(attn16_ms.median, 1),
                            " ms/step (", fmt(100 * attn16_ms.median / ms16.median, 0), "% of the step)\n    step ",
                            stats_text(speedup, 3), "x fp32's (per round); ", fmt(gflops16.median, 1),
                            " model GFLOP/s = ", stats_text(share16, 2), " of the in-process bf16 product (",
                            fmt(limit16.median, 1), " GFLOP/s)\n"));
  }
  rows.front()["precision"] = "fp32";
  if (o.json) {
    for (auto& r : rows) std::printf("%s\n", r.dump().c_str());
    return 0;
  }
  std::string names = "full";
  for (const TrainVariant& v : variants) names += ", " + v.name;
  if (with_bf16) names += ", full bf16, bf16 product";
  std::printf("%s: %d layers, hidden %d, %d heads x %d (%d KV), SwiGLU %d, vocab %d, batch %d x %d, %d thread%s\n",
              config_name.c_str(), L, m.hidden_size, H, m.head_dim, m.num_key_value_heads, m.intermediate_size,
              m.vocab_size, B, T, num_threads(), num_threads() == 1 ? "" : "s");
  std::printf("%d rounds (%s, sgemm) after %d warm-up round%s, %.1f s%s; figures: median (min, spread = IQR / median)\n",
              res.rounds, names.c_str(), res.warmup_rounds, res.warmup_rounds == 1 ? "" : "s", res.seconds,
              res.settled ? "" : " (spreads not all settled)");
  std::printf("  full windows: %.0f tokens/s, ms/step %s, attention %.1f ms/step (%.0f%% of the step)\n"
              "    %.1f model GFLOP/s = %s of the in-process sgemm (%.1f GFLOP/s), peak RSS %.0f MB\n",
              tok_s.median, stats_text(full_ms, 1).c_str(), attn_full_ms.median,
              100 * attn_full_ms.median / full_ms.median, gflops.median, stats_text(sgemm_share, 2).c_str(),
              sgemm_gflops.median, peak_rss);
  for (const std::string& l : lines) std::printf("%s", l.c_str());
  if (any_flag) print_flag_note(lim);
  return 0;
}

}  // namespace aah
