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
  const double norm = global_norm(*model.backend, model.grads_data(), model.num_params()) / (B * T);
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

// The configurations timed against full windows: the regime (unless full), warmed up on `model` and frozen, then
// every --windows set (mix: the paper's adaptive mix; T/8), the same in every layer.
std::vector<TrainVariant> train_variants(const std::string& regime, int context, const std::string& preset,
                                         const std::vector<std::string>& window_sets, Model<float>& model,
                                         const std::vector<int32_t>& tokens, int T, int L, int H) {
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
  return variants;
}

// Model FLOPs per token: 6 x (matmul parameters) + attention: QK^T and PV are 2 x 2 x D flops per visible
// pair forward, twice that backward; causal pairs average (T + 1) / 2 per query.
double model_flops_per_token(const ModelConfig& m, int T) {
  const int L = m.num_hidden_layers, H = m.num_attention_heads;
  const double C = m.hidden_size, D = m.head_dim;
  const double matmul_params = L * (C * (H + 2 * m.num_key_value_heads) * D + C * H * D + 3 * C * m.intermediate_size) +
                               double(m.vocab_size) * C;
  return 6 * matmul_params + 3 * L * H * 4 * D * (T + 1) / 2.0;
}

// What every row of a bench train reads: the configuration and the measurement (case 0: full windows; case
// 1 + i: variant i), full windows' attention seconds per round.
struct TrainBenchRun {
  std::string config_name;
  int B, T;
  const MeasureResult& res;
  const std::vector<double>& attn_full;
  double tokens_per_step, flops_per_token, peak_rss;
  bool samples;  // --samples: every sample in the stats
};

// The measurement's figures on every row.
void add_measure_fields(nlohmann::json& row, const MeasureResult& res) {
  row["rounds"] = res.rounds;
  row["warmup_rounds"] = res.warmup_rounds;
  row["settled"] = res.settled;
  row["measure_seconds"] = res.seconds;
  row["threads"] = num_threads();
}

// Full windows' figures, and the sgemm's (case i_sgemm) as the reference rate.
struct FullFigures {
  SampleStats ms, attn_ms, tok_s, gflops, sgemm_gflops, sgemm_share;
};
FullFigures full_figures(const TrainBenchRun& b, int i_sgemm, double sgemm_flops) {
  const double lim = b.res.spread_limit;
  const SampleStats& full = b.res.cases[0];
  FullFigures f;
  f.ms = scaled(full, 1e3), f.attn_ms = scaled(sample_stats(b.attn_full, lim), 1e3);
  f.tok_s = rate_stats(full, b.tokens_per_step, lim);
  f.gflops = scaled(rate_stats(full, b.flops_per_token * b.tokens_per_step, lim), 1e-9);
  f.sgemm_gflops = scaled(rate_stats(b.res.cases[i_sgemm], sgemm_flops, lim), 1e-9);
  // model GFLOP/s over sgemm GFLOP/s, per round: (model flops / t_step) / (sgemm flops / t_sgemm)
  f.sgemm_share = scaled(ratio_stats(b.res, i_sgemm, 0), b.flops_per_token * b.tokens_per_step / sgemm_flops);
  return f;
}

// What the rows of the full-window steps (fp32 and bf16) have in common: the configuration, the rate, the time,
// the attention time and the model FLOP rate, and the measurement.
nlohmann::json full_step_row(const TrainBenchRun& b, const SampleStats& tok_s, const SampleStats& ms,
                             const SampleStats& attn_ms, const SampleStats& gflops) {
  nlohmann::json row = {{"config", b.config_name},
                        {"regime", "full"},
                        {"context", b.T},
                        {"batch", b.B},
                        {"tokens_per_s", tok_s.median},
                        {"ms_per_step", ms.median},
                        {"attention_ms", attn_ms.median},
                        {"attention_share", attn_ms.median / ms.median},
                        {"model_gflops", gflops.median},
                        {"peak_rss_mb", b.peak_rss}};
  add_measure_fields(row, b.res);
  return row;
}

nlohmann::json full_row(const TrainBenchRun& b, const FullFigures& f) {
  const bool ss = b.samples;
  nlohmann::json row = full_step_row(b, f.tok_s, f.ms, f.attn_ms, f.gflops);
  row["sgemm_gflops"] = f.sgemm_gflops.median;
  row["sgemm_share"] = f.sgemm_share.median;
  row["steps_timed"] = b.res.rounds;
  row["stats"] = {{"ms_per_step", stats_json(f.ms, ss)},
                  {"tokens_per_s", stats_json(f.tok_s, ss)},
                  {"attention_ms", stats_json(f.attn_ms, ss)},
                  {"sgemm_gflops", stats_json(f.sgemm_gflops, ss)},
                  {"sgemm_share", stats_json(f.sgemm_share, ss)}};
  row["flagged"] = f.ms.flagged || f.sgemm_share.flagged;
  row["precision"] = "fp32";
  return row;
}

// A variant's figures (case ic). Its step: the timed step under its windows plus its controller's update cost,
// amortised. The prediction from skipped work: full's step minus full's attention time times the share of pairs
// skipped.
struct VariantFigures {
  SampleStats ms, tok_s, attn_ms, time_ratio, attn_ratio, expected_ms, vs_expected;
  bool flagged() const { return ms.flagged || time_ratio.flagged || attn_ratio.flagged || vs_expected.flagged; }
};
VariantFigures variant_figures(const TrainBenchRun& b, const TrainVariant& v, int ic) {
  const double lim = b.res.spread_limit;
  const SampleStats& full = b.res.cases[0];
  std::vector<double> with_ctrl = b.res.cases[ic].samples, expected = full.samples;
  for (double& t : with_ctrl) t += v.controller_ms / 1e3;
  for (size_t i = 0; i < expected.size(); i++) expected[i] -= b.attn_full[i] * (1 - v.pair_ratio);
  const SampleStats reg = sample_stats(with_ctrl, lim);
  VariantFigures f;
  f.ms = scaled(reg, 1e3), f.tok_s = rate_stats(reg, b.tokens_per_step, lim);
  f.attn_ms = scaled(sample_stats(v.attn, lim), 1e3);
  f.time_ratio = ratio_stats(with_ctrl, full.samples, lim);
  f.attn_ratio = ratio_stats(v.attn, b.attn_full, lim);
  f.expected_ms = scaled(sample_stats(expected, lim), 1e3);
  f.vs_expected = ratio_stats(with_ctrl, expected, lim);  // measured / predicted, per round
  return f;
}

nlohmann::json variant_row(const TrainBenchRun& b, const TrainVariant& v, const VariantFigures& f) {
  const bool ss = b.samples;
  nlohmann::json r = {{"config", b.config_name},
                      {"regime", v.name},
                      {"context", b.T},
                      {"batch", b.B},
                      {"tokens_per_s", f.tok_s.median},
                      {"ms_per_step", f.ms.median},
                      {"attention_ms", f.attn_ms.median},
                      {"controller_ms", v.controller_ms},
                      {"controller_share", v.controller_ms / f.ms.median},
                      {"attn_ratio", v.acr},
                      {"pair_ratio", v.pair_ratio},
                      {"time_ratio", f.time_ratio.median},
                      {"attention_time_ratio", f.attn_ratio.median},
                      {"expected_ms_per_step", f.expected_ms.median},
                      {"time_vs_expected", f.vs_expected.median},
                      {"windows", v.windows},
                      {"peak_rss_mb", b.peak_rss}};
  if (v.warm)
    r["warmup_updates"] = v.warm->updates, r["warmup_seconds"] = v.warm->seconds,
    r["controller_timed_from_update"] = v.warm->timed_from + 1;
  add_measure_fields(r, b.res);
  r["stats"] = {{"ms_per_step", stats_json(f.ms, ss)},
                {"tokens_per_s", stats_json(f.tok_s, ss)},
                {"attention_ms", stats_json(f.attn_ms, ss)},
                {"time_ratio", stats_json(f.time_ratio, ss)},
                {"attention_time_ratio", stats_json(f.attn_ratio, ss)},
                {"expected_ms_per_step", stats_json(f.expected_ms, ss)},
                {"time_vs_expected", stats_json(f.vs_expected, ss)}};
  r["flagged"] = f.ms.flagged || f.time_ratio.flagged;
  return r;
}

// A variant's lines of the text report.
std::string variant_text(const TrainVariant& v, const VariantFigures& f, int H) {
  std::string text;
  if (v.warm)
    text += str_cat("  ", v.name, ": warm-up ", v.warm->updates, " control update", v.warm->updates == 1 ? "" : "s",
                    " (forward only, ", fmt(v.warm->seconds, 1), " s), then windows frozen: ACR ", fmt(v.acr, 4),
                    ", exact pair ratio ", fmt(v.pair_ratio, 4), "\n");
  else
    text += str_cat("  ", v.name, " (fixed windows per layer:", window_list(v.windows, H), "): ACR ", fmt(v.acr, 4),
                    ", exact pair ratio ", fmt(v.pair_ratio, 4), "\n");
  text += str_cat("    ", fmt(f.tok_s.median, 0), " tokens/s, ms/step ", stats_text(f.ms, 1), ", attention ",
                  fmt(f.attn_ms.median, 1), " ms/step");
  if (v.warm)
    text += str_cat(
        ", controller ", fmt(v.controller_ms, 2), " ms/step = ", fmt(100 * v.controller_ms / f.ms.median, 2),
        "% (amortised over its interval, measured in the warm-up",
        v.warm->timed_from > 1 ? str_cat(" from update ", v.warm->timed_from + 1, ", at full evidence") : "", ")");
  text += str_cat("\n    step time ratio vs full ", stats_text(f.time_ratio, 3), ", attention time ratio ",
                  stats_text(f.attn_ratio, 3),
                  "\n    expected from the skipped attention work: ", fmt(f.expected_ms.median, 1),
                  " ms/step; measured / expected ", stats_text(f.vs_expected, 3), "\n");
  return text;
}

// bf16: the same model at train.precision=bf16 (its own weights and optimizer: same seed, same shape), full
// windows, and oneDNN's bf16 product as its reference rate: two more cases, interleaved with the rest (the step's
// attention seconds per call go to attn_bf16). Returns the step's case; the product's is the next.
int add_bf16_cases(std::vector<MeasureCase>& cases, MeasureOptions& mo, const Config& full_cfg,
                   std::optional<BenchTrainer>& bt16, std::vector<double>& attn_bf16, const Bf16GemmBench& bf16_gemm,
                   int i_full) {
  const int T = full_cfg.train.context;
  Config c16 = full_cfg;
  c16.train.precision = "bf16";
  bt16.emplace(c16);
  BenchTrainer* t16 = &*bt16;
  std::vector<double>* attn = &attn_bf16;
  const int i_bf16 = int(cases.size());
  cases.push_back({"full bf16", [t16, attn, T] {
                     t16->model.set_full_windows(T);
                     const double a0 = t16->model.attention_seconds;
                     t16->step();
                     attn->push_back(t16->model.attention_seconds - a0);
                   }});
  const int i_bf16_gemm = int(cases.size());
  cases.push_back(bf16_gemm.make_case());
  mo.ratios.push_back({i_full, i_bf16});
  mo.ratios.push_back({i_bf16_gemm, i_bf16});
  return i_bf16;
}

// The bf16 step's figures (case i_bf16; the bf16 product's: i_bf16 + 1), and the speedup over fp32's, per round.
struct Bf16Figures {
  SampleStats ms, attn_ms, tok_s, gflops, limit, share, speedup;
  std::string isa;             // the bf16 instructions oneDNN runs
  bf16::AttnKernel attention = bf16::AttnKernel::fp32;  // the kernel the bf16 step's attention runs
  bool flagged() const { return ms.flagged || speedup.flagged || share.flagged; }
};
Bf16Figures bf16_figures(const TrainBenchRun& b, const std::vector<double>& attn_bf16, int i_bf16,
                         double bf16_gemm_flops, int head_dim) {
  const double lim = b.res.spread_limit;
  const SampleStats& s16 = b.res.cases[i_bf16];
  Bf16Figures f;
  f.ms = scaled(s16, 1e3), f.attn_ms = scaled(sample_stats(attn_bf16, lim), 1e3);
  f.tok_s = rate_stats(s16, b.tokens_per_step, lim);
  f.gflops = scaled(rate_stats(s16, b.flops_per_token * b.tokens_per_step, lim), 1e-9);
  f.limit = scaled(rate_stats(b.res.cases[i_bf16 + 1], bf16_gemm_flops, lim), 1e-9);
  f.share = scaled(ratio_stats(b.res, i_bf16 + 1, i_bf16), b.flops_per_token * b.tokens_per_step / bf16_gemm_flops);
  f.speedup = ratio_stats(b.res, 0, i_bf16);  // fp32 time / bf16 time, per round
  bf16::cpu_supported(&f.isa);
  f.attention = bf16::attn_kernel(head_dim);
  return f;
}

nlohmann::json bf16_row(const TrainBenchRun& b, const Bf16Figures& f) {
  const bool ss = b.samples;
  nlohmann::json r = full_step_row(b, f.tok_s, f.ms, f.attn_ms, f.gflops);
  r["precision"] = "bf16";
  r["isa"] = f.isa;
  r["attention_kernel"] = bf16::attn_kernel_name(f.attention);
  r["bf16_gemm_gflops"] = f.limit.median;
  r["bf16_gemm_share"] = f.share.median;
  r["speedup_vs_fp32"] = f.speedup.median;
  r["stats"] = {{"ms_per_step", stats_json(f.ms, ss)},        {"tokens_per_s", stats_json(f.tok_s, ss)},
                {"attention_ms", stats_json(f.attn_ms, ss)},  {"bf16_gemm_gflops", stats_json(f.limit, ss)},
                {"bf16_gemm_share", stats_json(f.share, ss)}, {"speedup_vs_fp32", stats_json(f.speedup, ss)}};
  r["flagged"] = f.ms.flagged || f.speedup.flagged;
  return r;
}

// The bf16 step's lines of the text report.
std::string bf16_text(const Bf16Figures& f) {
  return str_cat("  full windows, bf16 products (oneDNN, ", f.isa, "; attention ",
                 bf16::attn_kernel_how(f.attention), "): ", fmt(f.tok_s.median, 0), " tokens/s, ms/step ",
                 stats_text(f.ms, 1), ", attention ", fmt(f.attn_ms.median, 1), " ms/step (",
                 fmt(100 * f.attn_ms.median / f.ms.median, 0), "% of the step)\n    step ", stats_text(f.speedup, 3),
                 "x fp32's (per round); ", fmt(f.gflops.median, 1), " model GFLOP/s = ", stats_text(f.share, 2),
                 " of the in-process bf16 product (", fmt(f.limit.median, 1), " GFLOP/s)\n");
}

// The text report's head: the configuration, the measurement and full windows' figures.
void print_train_head(const TrainBenchRun& b, const ModelConfig& m, const std::vector<TrainVariant>& variants,
                      bool with_bf16, const FullFigures& f) {
  const MeasureResult& res = b.res;
  std::string names = "full";
  for (const TrainVariant& v : variants) names += ", " + v.name;
  if (with_bf16) names += ", full bf16, bf16 product";
  std::printf("%s: %d layers, hidden %d, %d heads x %d (%d KV), SwiGLU %d, vocab %d, batch %d x %d, %d thread%s\n",
              b.config_name.c_str(), m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.head_dim,
              m.num_key_value_heads, m.intermediate_size, m.vocab_size, b.B, b.T, num_threads(),
              num_threads() == 1 ? "" : "s");
  std::printf(
      "%d rounds (%s, sgemm) after %d warm-up round%s, %.1f s%s; figures: median (min, spread = IQR / median)\n",
      res.rounds, names.c_str(), res.warmup_rounds, res.warmup_rounds == 1 ? "" : "s", res.seconds,
      res.settled ? "" : " (spreads not all settled)");
  std::printf(
      "  full windows: %.0f tokens/s, ms/step %s, attention %.1f ms/step (%.0f%% of the step)\n"
      "    %.1f model GFLOP/s = %s of the in-process sgemm (%.1f GFLOP/s), peak RSS %.0f MB\n",
      f.tok_s.median, stats_text(f.ms, 1).c_str(), f.attn_ms.median, 100 * f.attn_ms.median / f.ms.median,
      f.gflops.median, stats_text(f.sgemm_share, 2).c_str(), f.sgemm_gflops.median, b.peak_rss);
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
  std::vector<TrainVariant> variants = train_variants(regime, context, preset, window_sets, model, bt.tokens, T, L, H);

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
  const bool with_bf16 = std::find(precisions.begin(), precisions.end(), "bf16") != precisions.end();
  std::optional<BenchTrainer> bt16;
  std::vector<double> attn_bf16;
  const Bf16GemmBench bf16_gemm;
  const int i_bf16 = with_bf16 ? add_bf16_cases(cases, mo, full_cfg, bt16, attn_bf16, bf16_gemm, i_full) : -1;
  const MeasureResult res = measure_interleaved(cases, mo);
  attn_full.erase(attn_full.begin(), attn_full.begin() + res.warmup_rounds);
  for (TrainVariant& v : variants) v.attn.erase(v.attn.begin(), v.attn.begin() + res.warmup_rounds);

  const TrainBenchRun b{preset.empty() ? "bench-c" : "preset " + preset,
                        B,
                        T,
                        res,
                        attn_full,
                        double(B) * T,
                        model_flops_per_token(m, T),
                        peak_rss_mb(),
                        o.samples};
  const FullFigures full = full_figures(b, i_sgemm, sgemm.flops());
  std::vector<nlohmann::json> rows = {full_row(b, full)};
  bool any_flag = rows[0]["flagged"].get<bool>();
  std::vector<std::string> lines;
  for (size_t vi = 0; vi < variants.size(); vi++) {
    const VariantFigures f = variant_figures(b, variants[vi], int(vi) + 1);
    rows.push_back(variant_row(b, variants[vi], f));
    any_flag = any_flag || f.flagged();
    lines.push_back(variant_text(variants[vi], f, H));
  }
  if (with_bf16) {
    attn_bf16.erase(attn_bf16.begin(), attn_bf16.begin() + res.warmup_rounds);
    const Bf16Figures f = bf16_figures(b, attn_bf16, i_bf16, bf16_gemm.flops(), m.head_dim);
    rows.push_back(bf16_row(b, f));
    any_flag = any_flag || f.flagged();
    lines.push_back(bf16_text(f));
  }
  if (o.json) {
    for (auto& r : rows) std::printf("%s\n", r.dump().c_str());
    return 0;
  }
  print_train_head(b, m, variants, with_bf16, full);
  for (const std::string& l : lines) std::printf("%s", l.c_str());
  if (any_flag) print_flag_note(res.spread_limit);
  return 0;
}

}  // namespace aah
