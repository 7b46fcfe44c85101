#include "eval/probe.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "eval/retrieval.h"
#include "data/shard.h"
#include "data/synth.h"
#include "kernels/attention_common.h"
#include "model/config.h"
#include "model/engine.h"
#include "model/weights.h"

namespace aah {

double attn_mass(const float* q, const float* k, int H, int Hkv, int T, int D, int h, int window, int query, int k0,
                 int k1) {
  const float* qi = q + (int64_t(h) * T + query) * D;
  const float* kh = k + int64_t(h / (H / Hkv)) * T * D;
  const double scale = 1 / std::sqrt(double(D));
  std::vector<double> s(size_t(query) + 1, -INFINITY);  // scores of the visible keys 0..query
  double mx = -INFINITY;
  for (int j = 0; j <= query; j++) {
    if (!attn_visible(query, j, window)) continue;
    double dot = 0;
    for (int d = 0; d < D; d++) dot += double(qi[d]) * kh[int64_t(j) * D + d];
    s[j] = dot * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0, in = 0;
  for (int j = 0; j <= query; j++) {
    const double p = std::exp(s[j] - mx);  // 0 for an invisible key
    sum += p;
    if (j >= k0 && j < k1) in += p;
  }
  return in / sum;
}

namespace {

// The validation windows of a synth corpus as eval_loss cuts them (window w is tokens [w T, w T + T], inputs, and
// targets shifted by one), their countable questions, and retrieval scored under the model's windows in force.
struct RetrievalSet {
  const TokenShard& val;
  int T, windows, batch;
  std::vector<std::vector<RetrievalQuestion>> questions;  // per window
  int64_t n = 0;                                           // questions counted
  int w0 = 0;  // the first window of the micro-batch in flight (for a before_attention hook)

  RetrievalSet(const Config& cfg, const TokenShard& v, const char* who) : val(v), T(cfg.train.context) {
    windows = int(std::min<int64_t>((int64_t(val.tokens.size()) - 1) / T, cfg.train.eval_windows));
    if (windows <= 0)
      fail(who, " ", val.path, " has ", val.tokens.size(), " tokens: need at least context+1 = ", T + 1);
    batch = std::min(cfg.train.batch_size, windows);
    questions.resize(size_t(windows));
    for (int w = 0; w < windows; w++) {
      const int32_t* in = val.tokens.data() + int64_t(w) * T;
      questions[size_t(w)] = retrieval_questions(in, in + 1, T);
      n += int64_t(questions[size_t(w)].size());
    }
    if (n == 0)
      fail(who, " ", val.path, ": no question has its DEF within a window of ", T, " tokens (", windows,
           " windows); a longer train.context or more train.eval_windows finds some");
  }
  // {"accuracy", "loss", ...} of retrieval_json over every window. B consecutive windows' inputs are contiguous
  // (stride T) in the token stream, and their targets too, one token later.
  nlohmann::json score(Model<float>& model, const std::vector<int>& candidate_windows) {
    std::vector<RetrievalBucket> b = retrieval_buckets(candidate_windows);
    for (w0 = 0; w0 < windows; w0 += batch) {
      const int B = std::min(batch, windows - w0);
      const int32_t* in = val.tokens.data() + int64_t(w0) * T;
      model.forward(in, in + 1, B, T);
      retrieval_score_forward(b, model, in, in + 1, B, T);
    }
    return retrieval_json(b);
  }
};

Config probe_config(const std::string& run, const std::vector<std::string>& sets) {
  Config cfg = run_config_load(run);
  for (auto& s : sets) config_set(cfg, s);
  config_validate(cfg);
  return cfg;
}

void check_vocab(const TokenShard& val, const Config& cfg, const char* who) {
  if (int64_t(val.vocab_size) > cfg.model.vocab_size)
    fail(who, " ", val.path, " has vocabulary ", val.vocab_size, " but the model's is ", cfg.model.vocab_size);
}

}  // namespace

nlohmann::json probe_heads(const ProbeHeadsOptions& o) {
  const Config cfg = probe_config(o.run, o.sets);
  if (!synth_is_corpus(o.data))
    fail("[probe] ", o.data, ": not a synth corpus (its meta.json must say \"source\": \"synth\"; aah data synth)");
  const TokenShard val = shard_read(o.data + "/val.bin");
  check_vocab(val, cfg, "[probe]");
  const int T = cfg.train.context, L = cfg.model.num_hidden_layers, H = cfg.model.num_attention_heads;
  const int Hkv = cfg.model.num_key_value_heads, D = cfg.model.head_dim;
  RetrievalSet set(cfg, val, "[probe]");
  const std::vector<int> candidates = controller_config_of(cfg).windows;

  Engine engine(cfg, EngineOptions(set.batch, T).load(o.run).no_policy());
  Model<float>& model = engine.model;
  // Full windows: the mass on each question's DEF k v, measured from the q and k each layer's attention gets.
  std::vector<double> mass(size_t(L) * H, 0.0);  // (L, H) summed over the questions
  model.set_full_windows(T);
  model.before_attention = [&](int l, const float* q, const float* k, const float*, int B, int, int* win) {
    for (int b = 0; b < B; b++)
      for (const RetrievalQuestion& qu : set.questions[size_t(set.w0 + b)])
        for (int h = 0; h < H; h++)
          mass[size_t(l) * H + h] += attn_mass(q + int64_t(b) * H * T * D, k + int64_t(b) * Hkv * T * D, H, Hkv, T,
                                               D, h, win[h], qu.query, qu.def, qu.def + 3);
  };
  const double acc_full = set.score(model, candidates)["accuracy"].get<double>();
  model.before_attention = nullptr;
  // Each head alone cut to the smallest candidate window, every other head full.
  const int cut = candidates.front();
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) {
      model.set_full_windows(T);
      model.windows()[size_t(l) * H + h] = cut;
      heads.push_back({{"layer", l},
                       {"head", h},
                       {"def_mass", mass[size_t(l) * H + h] / double(set.n)},
                       {"accuracy_drop", acc_full - set.score(model, candidates)["accuracy"].get<double>()}});
    }
  return {{"heads", heads}, {"accuracy_full", acc_full}, {"questions", set.n}, {"context", T}, {"cut_window", cut}};
}

RetrievalCutTable retrieval_cut_table(const Config& cfg, const std::string& weights_dir, const TokenShard& val) {
  check_vocab(val, cfg, "[oracle]");
  RetrievalSet set(cfg, val, "[oracle]");
  RetrievalCutTable t;
  t.windows = controller_config_of(cfg).windows;
  t.questions = set.n;
  const int T = cfg.train.context, N = cfg.model.num_hidden_layers * cfg.model.num_attention_heads;
  const int K = int(t.windows.size());
  Engine engine(cfg, EngineOptions(set.batch, T).load(weights_dir).no_policy());
  Model<float>& model = engine.model;
  model.set_full_windows(T);
  const nlohmann::json full = set.score(model, t.windows);
  t.loss_full = full["loss"].get<double>(), t.accuracy_full = full["accuracy"].get<double>();
  t.loss_increase.assign(size_t(N) * K, 0.0);
  t.accuracy_drop.assign(size_t(N) * K, 0.0);
  for (int n = 0; n < N; n++)
    for (int k = 0; k + 1 < K; k++) {  // the full window (k = K-1) changes nothing
      model.set_full_windows(T);
      model.windows()[size_t(n)] = t.windows[size_t(k)];
      const nlohmann::json cut = set.score(model, t.windows);
      t.loss_increase[size_t(n) * K + k] = cut["loss"].get<double>() - t.loss_full;
      t.accuracy_drop[size_t(n) * K + k] = t.accuracy_full - cut["accuracy"].get<double>();
    }
  return t;
}

nlohmann::json retrieval_cut_table_json(const RetrievalCutTable& t, const std::vector<int>& chosen) {
  const int K = int(t.windows.size()), N = int(t.loss_increase.size()) / K;
  nlohmann::json heads = nlohmann::json::array();
  for (int n = 0; n < N; n++) {
    std::vector<double> li(t.loss_increase.begin() + n * K, t.loss_increase.begin() + (n + 1) * K);
    std::vector<double> ad(t.accuracy_drop.begin() + n * K, t.accuracy_drop.begin() + (n + 1) * K);
    heads.push_back({{"loss_increase", li}, {"accuracy_drop", ad}, {"window", chosen.at(size_t(n))}});
  }
  return {{"windows", t.windows}, {"questions", t.questions}, {"loss_full", t.loss_full},
          {"accuracy_full", t.accuracy_full}, {"heads", heads}};
}

}  // namespace aah
