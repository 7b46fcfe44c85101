#include "eval/probe.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "eval/retrieval.h"
#include "io/shard.h"
#include "io/synth.h"
#include "kernels/attention_common.h"
#include "model/config.h"
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

nlohmann::json probe_heads(const ProbeHeadsOptions& o) {
  Config cfg = run_config_load(o.run);
  for (auto& s : o.sets) config_set(cfg, s);
  config_validate(cfg);
  if (!synth_is_corpus(o.data))
    fail("[probe] ", o.data, ": not a synth corpus (its meta.json must say \"source\": \"synth\"; aah data synth)");
  const TokenShard val = shard_read(o.data + "/val.bin");
  if (int64_t(val.vocab_size) > cfg.model.vocab_size)
    fail("[probe] ", val.path, " has vocabulary ", val.vocab_size, " but the model's is ", cfg.model.vocab_size);
  const int T = cfg.train.context, L = cfg.model.num_hidden_layers, H = cfg.model.num_attention_heads;
  const int Hkv = cfg.model.num_key_value_heads, D = cfg.model.head_dim;
  const int windows = int(std::min<int64_t>((int64_t(val.tokens.size()) - 1) / T, cfg.train.eval_windows));
  if (windows <= 0) fail("[probe] ", val.path, " has ", val.tokens.size(), " tokens: need at least context+1 = ", T + 1);
  const int batch = std::min(cfg.train.batch_size, windows);
  // The windows of eval_loss: window w is tokens [w T, w T + T] (inputs, and targets shifted by one).
  std::vector<std::vector<RetrievalQuestion>> questions(size_t(windows), std::vector<RetrievalQuestion>{});
  int64_t n = 0;
  for (int w = 0; w < windows; w++) {
    const int32_t* in = val.tokens.data() + int64_t(w) * T;
    questions[size_t(w)] = retrieval_questions(in, in + 1, T);
    n += int64_t(questions[size_t(w)].size());
  }
  if (n == 0)
    fail("[probe] ", val.path, ": no question has its DEF within a window of ", T, " tokens (", windows,
         " windows); a longer train.context or more train.eval_windows finds some");

  Model<float> model(cfg.model, batch, T, /*with_grads=*/false);
  model.attn_impl = attn_impl_from_name(cfg.aah.attention);
  weights_load_dir(o.run, model);
  // Retrieval accuracy over the windows under the model's windows in force. B consecutive windows' inputs are
  // contiguous (stride T) in the token stream, and their targets too, one token later.
  int w0 = 0;  // the first window of the micro-batch in flight (for the mass hook)
  auto accuracy = [&]() {
    std::vector<RetrievalBucket> b = retrieval_buckets(controller_config_of(cfg).windows);
    for (w0 = 0; w0 < windows; w0 += batch) {
      const int B = std::min(batch, windows - w0);
      const int32_t* in = val.tokens.data() + int64_t(w0) * T;
      model.forward(in, in + 1, B, T);
      retrieval_score_forward(b, model, in, in + 1, B, T);
    }
    return retrieval_json(b)["accuracy"].get<double>();
  };

  // Full windows: the mass on each question's DEF k v, measured from the q and k each layer's attention gets.
  std::vector<double> mass(size_t(L) * H, 0.0);  // (L, H) summed over the questions
  model.set_full_windows(T);
  model.before_attention = [&](int l, const float* q, const float* k, const float*, int B, int, int* win) {
    for (int b = 0; b < B; b++)
      for (const RetrievalQuestion& qu : questions[size_t(w0 + b)])
        for (int h = 0; h < H; h++)
          mass[size_t(l) * H + h] += attn_mass(q + int64_t(b) * H * T * D, k + int64_t(b) * Hkv * T * D, H, Hkv, T,
                                               D, h, win[h], qu.query, qu.def, qu.def + 3);
  };
  const double acc_full = accuracy();
  model.before_attention = nullptr;
  // Each head alone cut to the smallest candidate window, every other head full.
  const int cut = controller_config_of(cfg).windows.front();
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) {
      model.set_full_windows(T);
      model.windows()[size_t(l) * H + h] = cut;
      heads.push_back({{"layer", l},
                       {"head", h},
                       {"def_mass", mass[size_t(l) * H + h] / double(n)},
                       {"accuracy_drop", acc_full - accuracy()}});
    }
  return {{"heads", heads}, {"accuracy_full", acc_full}, {"questions", n}, {"context", T}, {"cut_window", cut}};
}

}  // namespace aah
